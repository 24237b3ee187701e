package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// cmdWatch prints the changes beneath a directory as they come (sandboxd.v1.Files/Watch), one
// line each (--output json: one JSON object a line), until interrupted, --count events were
// printed, or the watch ends (then its error).
func cmdWatch(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	recursive := fs.Bool("r", false, "watch every directory beneath too")
	count := fs.Int("count", 0, "exit after this many events (the ready event not counted); 0: never")
	resume := fs.String("resume", "", "resume the kept watch of this id (with --since)")
	since := fs.Uint64("since", 0, "with --resume: the last sequence number already seen")
	rescan := fs.Duration("rescan", 0, "also compare a snapshot of the tree this often")
	var include, exclude multi
	fs.Var(&include, "include", "only paths matching this glob (repeatable)")
	fs.Var(&exclude, "exclude", "never paths matching this glob; excluded directories are not watched (repeatable)")
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
	opts := []sandboxd.WatchOption{sandboxd.Include(include...), sandboxd.Exclude(exclude...)}
	if *recursive {
		opts = append(opts, sandboxd.WatchRecursive())
	}
	if *resume != "" {
		opts = append(opts, sandboxd.ResumeWatch(*resume, *since))
	}
	if *rescan > 0 {
		opts = append(opts, sandboxd.RescanEvery(*rescan))
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := c.Watch(ctx, p, opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	n := 0
	for ev := range w.Events {
		printWatchEvent(g, ev)
		if ev.Kind != sandboxd.WatchReady {
			n++
		}
		if *count > 0 && n >= *count {
			return nil
		}
	}
	return w.Err()
}

func printWatchEvent(g *globals, ev sandboxd.WatchEvent) {
	if g.json() {
		out := map[string]any{"seq": ev.Seq, "kind": ev.Kind}
		switch ev.Kind {
		case sandboxd.WatchReady:
			out["watch"], out["resumed"], out["directories"] = ev.WatchID, ev.Resumed, ev.Directories
		case sandboxd.WatchOverflow:
			out["from"], out["to"], out["rescan"], out["reason"] = ev.LostFrom, ev.LostTo, true, ev.Reason
		case sandboxd.WatchRename:
			out["from"], out["to"] = ev.OldPath, ev.Path
			fallthrough
		default:
			out["path"], out["dir"] = ev.Path, ev.Dir
		}
		json.NewEncoder(os.Stdout).Encode(out)
		return
	}
	name := ev.Path
	if ev.Dir {
		name += "/"
	}
	when := time.Now().Format("15:04:05.000")
	switch ev.Kind {
	case sandboxd.WatchReady:
		fmt.Fprintf(os.Stderr, "watching (watch %s, %d directories%s)\n", ev.WatchID, ev.Directories,
			map[bool]string{true: ", resumed", false: ""}[ev.Resumed])
	case sandboxd.WatchOverflow:
		fmt.Printf("%s %6d overflow: events %d..%d lost (%s): list again\n", when, ev.Seq, ev.LostFrom,
			ev.LostTo, ev.Reason)
	case sandboxd.WatchRename:
		fmt.Printf("%s %6d rename %s -> %s\n", when, ev.Seq, ev.OldPath, name)
	default:
		fmt.Printf("%s %6d %-6s %s\n", when, ev.Seq, ev.Kind, name)
	}
}
