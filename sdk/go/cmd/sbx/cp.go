package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// cpResult is what `cp --output json` prints.
type cpResult struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Direction   string `json:"direction"` // "upload" or "download"
	Kind        string `json:"kind"`      // "file" or "directory"
	Bytes       int64  `json:"bytes"`
	Entries     int    `json:"entries,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
}

func remote(p string) (string, bool) {
	if strings.HasPrefix(p, ":") {
		return p[1:], true
	}
	return p, false
}

func cmdCp(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("cp", flag.ContinueOnError)
	progress := fs.Bool("progress", false, "draw a progress bar even when stderr is not a terminal")
	quiet := fs.Bool("q", false, "no progress bar")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		fmt.Fprintln(os.Stderr, "sbx cp: want SRC DST, one of them :PATH in the sandbox")
		return errUsage
	}
	src, srcRemote := remote(rest[0])
	dst, dstRemote := remote(rest[1])
	if srcRemote == dstRemote {
		return errors.New("cp: exactly one of SRC and DST must be a sandbox path (:PATH)")
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	var b *bar
	if !*quiet && (*progress || term.IsTerminal(int(os.Stderr.Fd()))) {
		b = newBar(os.Stderr, filepath.Base(src))
	}
	var res *cpResult
	if dstRemote {
		res, err = upload(ctx, c, src, dst, b)
	} else {
		res, err = download(ctx, c, src, dst, b)
	}
	if err != nil {
		return err
	}
	if b != nil {
		b.finish()
	}
	if g.json() {
		printJSON(res)
	}
	return nil
}

func progressOpt(b *bar) []sandboxd.FileOption {
	if b == nil {
		return nil
	}
	return []sandboxd.FileOption{sandboxd.WithProgress(b.update)}
}

// counting reports progress to b (if any) and keeps the bytes moved in *n.
func counting(b *bar, n *int64) sandboxd.FileOption {
	return sandboxd.WithProgress(func(d, t int64) {
		*n = d
		if b != nil {
			b.update(d, t)
		}
	})
}

func upload(ctx context.Context, c *sandboxd.Client, src, dst string, b *bar) (*cpResult, error) {
	res := &cpResult{Source: src, Destination: ":" + dst, Direction: "upload", Kind: "file"}
	if src == "-" {
		r, err := c.Upload(ctx, dst, os.Stdin, progressOpt(b)...)
		if err != nil {
			return nil, err
		}
		res.Bytes, res.SHA256 = r.Size, r.SHA256
		return res, nil
	}
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		res.Kind = "directory"
		var sent int64
		n, err := c.UploadDir(ctx, src, dst, counting(b, &sent))
		if err != nil {
			return nil, err
		}
		res.Entries, res.Bytes = n, sent
		return res, nil
	}
	// A file copied onto a directory (or a path ending in /) goes inside it.
	if strings.HasSuffix(dst, "/") {
		dst += filepath.Base(src)
	} else if fi, err := c.Stat(ctx, dst); err == nil && fi.IsDir() {
		dst = path.Join(dst, filepath.Base(src))
	}
	res.Destination = ":" + dst
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opts := append(progressOpt(b), sandboxd.Mode(st.Mode().Perm()))
	r, err := c.Upload(ctx, dst, f, opts...)
	if err != nil {
		return nil, err
	}
	res.Bytes, res.SHA256 = r.Size, r.SHA256
	return res, nil
}

func download(ctx context.Context, c *sandboxd.Client, src, dst string, b *bar) (*cpResult, error) {
	res := &cpResult{Source: ":" + src, Destination: dst, Direction: "download", Kind: "file"}
	fi, err := c.Stat(ctx, src)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		res.Kind = "directory"
		var got int64
		n, err := c.DownloadDir(ctx, src, dst, counting(b, &got))
		if err != nil {
			return nil, err
		}
		res.Entries, res.Bytes = n, got
		return res, nil
	}
	if dst == "-" {
		n, err := c.Download(ctx, src, os.Stdout, progressOpt(b)...)
		res.Bytes = n
		return res, err
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	res.Destination = dst
	n, err := c.DownloadFile(ctx, src, dst, progressOpt(b)...)
	if err != nil {
		return nil, err
	}
	if fi.Type == "file" {
		os.Chmod(dst, fi.Mode.Perm())
	}
	res.Bytes = n
	return res, nil
}
