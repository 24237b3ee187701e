package sandboxd

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// UploadDir sends the tree of the local directory local into the directory p (created) as a
// streamed tar: files, directories, modes, mtimes and symlinks. Returns the entries unpacked.
func (c *Client) UploadDir(ctx context.Context, local, p string, opts ...FileOption) (int, error) {
	fc := fileOpts(opts)
	st, err := os.Stat(local)
	if err != nil {
		return 0, err
	}
	if !st.IsDir() {
		return 0, fmt.Errorf("%s is not a directory", local)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, local)) }()
	defer pr.Close()
	var body io.Reader = pr
	if fc.progress != nil {
		body = &progressReader{r: pr, total: -1, fn: fc.progress}
	}
	ctx, _ = c.rpcCtx(ctx, false)
	req, err := http.NewRequestWithContext(ctx, "PUT", c.fileURL("files", p, url.Values{"archive": {"tar"}}), io.NopCloser(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var doc struct {
		Entries int `json:"entries"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return 0, transportError("upload "+p, err)
	}
	return doc.Entries, nil
}

// writeTar writes the tree below root (not root itself) as tar to w.
func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// DownloadDir fetches the tree of the directory p as a streamed tar and unpacks it into the
// local directory local (created). An entry that would land outside local (absolute names,
// "..", links pointing out, writes through such links) or that is not a file, directory or
// link is refused with ErrPermissionDenied / ErrInvalidArgument. Returns the entries.
func (c *Client) DownloadDir(ctx context.Context, p, local string, opts ...FileOption) (int, error) {
	fc := fileOpts(opts)
	ctx, _ = c.rpcCtx(ctx, false)
	req, err := http.NewRequestWithContext(ctx, "GET", c.fileURL("files", p, url.Values{"archive": {"tar"}}), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if fc.progress != nil {
		body = &progressReader{r: resp.Body, total: -1, fn: fc.progress}
	}
	return extractTar(body, local)
}

type dirTimes struct {
	path  string
	mode  os.FileMode
	mtime time.Time
}

func extractTar(r io.Reader, dest string) (int, error) {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return 0, err
	}
	root, err := filepath.EvalSymlinks(dest)
	if err != nil {
		return 0, err
	}
	root, _ = filepath.Abs(root)
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	var dirs []dirTimes
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, transportError("tar", err)
		}
		target, err := checkEntry(root, h)
		if err != nil {
			return n, err
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return n, err
			}
			dirs = append(dirs, dirTimes{target, mode, h.ModTime})
		case tar.TypeReg:
			if err := writeEntry(target, tr, mode, h.ModTime, buf); err != nil {
				return n, err
			}
		case tar.TypeSymlink:
			os.Remove(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return n, err
			}
		case tar.TypeLink:
			os.Remove(target)
			if err := os.Link(filepath.Join(root, h.Linkname), target); err != nil {
				return n, err
			}
		}
		n++
	}
	// Directories last: their entries changed their mtimes, and a read-only one would have
	// refused them.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := os.Chmod(d.path, d.mode); err != nil {
			return n, err
		}
		_ = os.Chtimes(d.path, d.mtime, d.mtime)
	}
	return n, nil
}

func writeEntry(target string, r io.Reader, mode os.FileMode, mtime time.Time, buf []byte) error {
	os.Remove(target)
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, r, buf); err != nil {
		f.Close()
		return transportError("tar", err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(target, mtime, mtime)
}

func inside(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// checkEntry returns where an entry goes, or why it may not.
func checkEntry(root string, h *tar.Header) (string, error) {
	deny := func(why string) (string, error) {
		return "", &Error{Code: "PERMISSION_DENIED", Message: fmt.Sprintf("tar entry %q %s", h.Name, why)}
	}
	name := strings.TrimSuffix(h.Name, "/")
	if !filepath.IsLocal(name) {
		return deny("leaves the directory")
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		return "", &Error{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf("tar entry %q is not a file, directory or link", h.Name)}
	}
	target := filepath.Join(root, name)
	parent, err := safeParent(root, filepath.Dir(target))
	if err != nil {
		return "", err
	}
	if parent == "" {
		return deny("is written through a link that leaves the directory")
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		// Only leading ".." segments: the rest then passes through checked links alone, so
		// the lexical result below is where the link really points.
		rest := h.Linkname
		for rest == ".." || strings.HasPrefix(rest, "../") {
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, ".."), "/")
		}
		if filepath.IsAbs(h.Linkname) || strings.Contains("/"+rest+"/", "/../") {
			return deny("points outside")
		}
		if !inside(root, filepath.Join(parent, h.Linkname)) {
			return deny("points outside")
		}
	case tar.TypeLink:
		if !filepath.IsLocal(h.Linkname) {
			return deny("links outside")
		}
	}
	return target, nil
}

// safeParent makes dir (below root) exist and returns its real path, or "" when it, or its
// closest existing ancestor, resolves outside root: nothing is created through such a link.
func safeParent(root, dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		real, err := filepath.EvalSymlinks(d)
		if err == nil {
			if !inside(root, real) {
				return "", nil
			}
			break
		}
		if !os.IsNotExist(err) || d == root || !inside(root, d) {
			return "", err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil || !inside(root, real) {
		return "", err
	}
	return real, nil
}
