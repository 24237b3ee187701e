package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func cmdLs(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	p := "/"
	if len(rest) > 1 {
		return errUsage
	} else if len(rest) == 1 {
		p = rest[0]
	}
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		ents, err := c.List(ctx, p)
		if err != nil {
			return err
		}
		if g.json() {
			type entry struct {
				Name    string    `json:"name"`
				Type    string    `json:"type"`
				Size    int64     `json:"size"`
				Mode    string    `json:"mode"`
				ModTime time.Time `json:"modified_at"`
			}
			out := make([]entry, len(ents))
			for i, e := range ents {
				out[i] = entry{e.Name, e.Type, e.Size, fmt.Sprintf("%04o", uint32(e.Mode)), e.ModTime}
			}
			printJSON(map[string]any{"path": p, "entries": out})
			return nil
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, e := range ents {
			kind := "-"
			name := e.Name
			if e.IsDir() {
				kind, name = "d", name+"/"
			}
			fmt.Fprintf(tw, "%s%s\t%d\t%s\t %s\n", kind, os.FileMode(e.Mode).Perm().String()[1:], e.Size,
				e.ModTime.Local().Format("2006-01-02 15:04"), name)
		}
		return tw.Flush()
	})
}

func cmdStat(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errUsage
	}
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		fi, err := c.Stat(ctx, rest[0])
		if err != nil {
			return err
		}
		if g.json() {
			printJSON(map[string]any{
				"path": fi.Path, "name": fi.Name, "type": fi.Type, "size": fi.Size,
				"mode": fmt.Sprintf("%04o", uint32(fi.Mode)), "uid": fi.UID, "gid": fi.GID,
				"modified_at": fi.ModTime, "symlink_target": fi.SymlinkTarget,
			})
			return nil
		}
		fmt.Printf("path: %s\ntype: %s\nsize: %d\nmode: %04o\nuid: %d\ngid: %d\nmodified: %s\n",
			fi.Path, fi.Type, fi.Size, uint32(fi.Mode), fi.UID, fi.GID, fi.ModTime.Format(time.RFC3339))
		if fi.SymlinkTarget != "" {
			fmt.Printf("target: %s\n", fi.SymlinkTarget)
		}
		return nil
	})
}

// simple runs a call that prints nothing (or {"ok": true} with --output json).
func simple(ctx context.Context, g *globals, call func(context.Context, *sandboxd.Client) error) error {
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		if err := call(ctx, c); err != nil {
			return err
		}
		if g.json() {
			printJSON(map[string]bool{"ok": true})
		}
		return nil
	})
}

func cmdMkdir(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("mkdir", flag.ContinueOnError)
	parents := fs.Bool("p", false, "create parents; an existing directory is fine")
	rest, err := parse(fs, g, args, true)
	if err != nil || len(rest) != 1 {
		return errUsage
	}
	var opts []sandboxd.FileOption
	if *parents {
		opts = append(opts, sandboxd.Parents())
	}
	return simple(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		return c.Mkdir(ctx, rest[0], opts...)
	})
}

func cmdRm(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("rm", flag.ContinueOnError)
	recursive := fs.Bool("r", false, "remove a directory and everything in it")
	rest, err := parse(fs, g, args, true)
	if err != nil || len(rest) != 1 {
		return errUsage
	}
	var opts []sandboxd.FileOption
	if *recursive {
		opts = append(opts, sandboxd.Recursive())
	}
	return simple(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		return c.Remove(ctx, rest[0], opts...)
	})
}

func cmdMv(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("mv", flag.ContinueOnError)
	force := fs.Bool("f", false, "replace an existing target")
	rest, err := parse(fs, g, args, true)
	if err != nil || len(rest) != 2 {
		return errUsage
	}
	var opts []sandboxd.FileOption
	if *force {
		opts = append(opts, sandboxd.Overwrite())
	}
	return simple(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		return c.Move(ctx, rest[0], rest[1], opts...)
	})
}
