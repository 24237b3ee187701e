package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FileInfo describes a path (lstat). Type is "file", "directory", "symlink" or "other".
type FileInfo struct {
	Path          string      `json:"path"`
	Name          string      `json:"name"`
	Type          string      `json:"type"`
	Size          int64       `json:"size"`
	Mode          os.FileMode `json:"mode"`
	UID           int         `json:"uid"`
	GID           int         `json:"gid"`
	ModTime       time.Time   `json:"modified_at"`
	SymlinkTarget string      `json:"symlink_target,omitempty"`
}

// IsDir reports whether the path is a directory.
func (f *FileInfo) IsDir() bool { return f.Type == "directory" }

// DirEntry is an entry of a directory listing. Type is "file" or "directory".
type DirEntry struct {
	Name    string      `json:"name"`
	Type    string      `json:"type"`
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"modified_at"`
}

// IsDir reports whether the entry is a directory.
func (d *DirEntry) IsDir() bool { return d.Type == "directory" }

// UploadResult is what the daemon wrote: size and SHA-256 (hex).
type UploadResult struct {
	Size   int64
	SHA256 string
}

// Health is the answer of /v1/health.
type Health struct {
	Status        string `json:"status"`
	UptimeSeconds int64  `json:"uptime_seconds"`
}

// Progress is called as a transfer moves: bytes done so far, and the total (-1 if unknown).
type Progress func(done, total int64)

type fileConfig struct {
	mode           *os.FileMode
	progress       Progress
	offset, length int64
	size           int64
	parents        bool
	recursive      bool
	overwrite      bool
}

// FileOption configures the file calls.
type FileOption func(*fileConfig)

// Mode sets the permission bits of an uploaded file or a new directory.
func Mode(m os.FileMode) FileOption { return func(f *fileConfig) { f.mode = &m } }

// WithProgress reports the progress of a transfer.
func WithProgress(p Progress) FileOption { return func(f *fileConfig) { f.progress = p } }

// Range downloads length bytes from offset (length <= 0: to the end).
func Range(offset, length int64) FileOption {
	return func(f *fileConfig) { f.offset, f.length = offset, length }
}

// Size tells Upload the size of a reader it cannot measure (sent as Content-Length).
func Size(n int64) FileOption { return func(f *fileConfig) { f.size = n } }

// Parents makes Mkdir create missing parents and accept an existing directory.
func Parents() FileOption { return func(f *fileConfig) { f.parents = true } }

// Recursive makes Remove remove a directory with everything in it.
func Recursive() FileOption { return func(f *fileConfig) { f.recursive = true } }

// Overwrite makes Move replace an existing target.
func Overwrite() FileOption { return func(f *fileConfig) { f.overwrite = true } }

func fileOpts(opts []FileOption) *fileConfig {
	fc := &fileConfig{size: -1}
	for _, o := range opts {
		o(fc)
	}
	return fc
}

// fileURL is /v1/<route>/<path>, each segment escaped; "." and ".." are sent escaped so that
// no HTTP layer resolves them away (the daemon refuses a path that climbs out).
func (c *Client) fileURL(route, p string, q url.Values) string {
	segs := strings.Split(strings.TrimLeft(p, "/"), "/")
	for i, s := range segs {
		if s == "." || s == ".." {
			segs[i] = strings.ReplaceAll(s, ".", "%2E")
		} else {
			segs[i] = url.PathEscape(s)
		}
	}
	u := c.base + "/v1/" + route + "/" + strings.Join(segs, "/")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// do sends a request; an error status becomes an *Error (the body is closed then).
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.httpRoute {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(req.Method+" "+req.URL.Path, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, httpError(resp.StatusCode, body)
	}
	return resp, nil
}

// small makes a bounded request whose answer is read whole (at most 16 MiB) into out (JSON)
// unless out is nil.
func (c *Client) small(ctx context.Context, method, u string, body any, out any) error {
	ctx, cancel := c.rpcCtx(ctx, true)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return transportError(method+" "+u, err)
	}
	return nil
}

// octal decodes the daemon's "0644" mode strings.
type octal os.FileMode

func (o *octal) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := strconv.ParseUint(s, 8, 32)
	*o = octal(v)
	return err
}

// Stat describes a path without following a final symlink (ErrNotFound if missing).
func (c *Client) Stat(ctx context.Context, p string) (*FileInfo, error) {
	var raw struct {
		FileInfo
		Mode octal `json:"mode"`
	}
	if err := c.small(ctx, "GET", c.fileURL("stat", p, nil), nil, &raw); err != nil {
		return nil, err
	}
	fi := raw.FileInfo
	fi.Mode = os.FileMode(raw.Mode)
	return &fi, nil
}

// Exists reports whether a path exists.
func (c *Client) Exists(ctx context.Context, p string) (bool, error) {
	err := c.small(ctx, "HEAD", c.fileURL("files", p, nil), nil, nil)
	if err == nil {
		return true, nil
	}
	if e, ok := err.(*Error); ok && e.Code == "NOT_FOUND" {
		return false, nil
	}
	return false, err
}

// List returns the entries of a directory, sorted by name (ErrInvalidArgument for a file).
func (c *Client) List(ctx context.Context, p string) ([]DirEntry, error) {
	ctx, cancel := c.rpcCtx(ctx, true)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.fileURL("files", p, nil), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil, &Error{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf("%q is not a directory", p)}
	}
	var doc struct {
		Entries []struct {
			DirEntry
			Mode octal `json:"mode"`
		} `json:"entries"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&doc); err != nil {
		return nil, transportError("list "+p, err)
	}
	out := make([]DirEntry, len(doc.Entries))
	for i, e := range doc.Entries {
		out[i] = e.DirEntry
		out[i].Mode = os.FileMode(e.Mode)
	}
	return out, nil
}

func modeQuery(q url.Values, m *os.FileMode) error {
	if m != nil {
		if *m > 0o777 {
			return &Error{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf("mode %o out of range", *m)}
		}
		q.Set("mode", fmt.Sprintf("0%03o", uint32(*m)))
	}
	return nil
}

// Mkdir creates a directory (Parents: with its parents, and an existing one is fine; Mode).
func (c *Client) Mkdir(ctx context.Context, p string, opts ...FileOption) error {
	fc := fileOpts(opts)
	q := url.Values{"parents": {strconv.FormatBool(fc.parents)}}
	if err := modeQuery(q, fc.mode); err != nil {
		return err
	}
	return c.small(ctx, "PUT", c.fileURL("dirs", p, q), nil, nil)
}

// Move renames from to to within the sandbox (Overwrite: replace an existing target).
func (c *Client) Move(ctx context.Context, from, to string, opts ...FileOption) error {
	fc := fileOpts(opts)
	body := map[string]any{"from": from, "to": to, "overwrite": fc.overwrite}
	return c.small(ctx, "POST", c.base+"/v1/move", body, nil)
}

// Remove removes a file, a symlink or an empty directory (Recursive: any directory).
func (c *Client) Remove(ctx context.Context, p string, opts ...FileOption) error {
	fc := fileOpts(opts)
	q := url.Values{"recursive": {strconv.FormatBool(fc.recursive)}}
	return c.small(ctx, "DELETE", c.fileURL("files", p, q), nil, nil)
}

// Health is the daemon's /v1/health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	return &h, c.small(ctx, "GET", c.base+"/v1/health", nil, &h)
}

// Metadata is the daemon's /v1/metadata environment.
func (c *Client) Metadata(ctx context.Context) (map[string]string, error) {
	var doc struct {
		Env map[string]string `json:"env"`
	}
	return doc.Env, c.small(ctx, "GET", c.base+"/v1/metadata", nil, &doc)
}

// WaitReady polls /readyz until the daemon is ready or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		err := c.small(ctx, "GET", c.base+"/readyz", nil, nil)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return transportError("readyz", fmt.Errorf("%w (last: %v)", ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type progressReader struct {
	r     io.Reader
	done  int64
	total int64
	fn    Progress
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		p.fn(p.done, p.total)
	}
	return n, err
}

// readerSize is the bytes left in r when it can tell (*os.File of a regular file, bytes and
// strings readers), else -1.
func readerSize(r io.Reader) int64 {
	switch v := r.(type) {
	case *os.File:
		st, err := v.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		pos, err := v.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		return st.Size() - pos
	case interface{ Len() int }:
		return int64(v.Len())
	}
	return -1
}

// Upload writes r to the file p, streamed (chunked when the size is unknown); the daemon
// writes a temp file and renames it into place. Options: Mode, WithProgress, Size.
func (c *Client) Upload(ctx context.Context, p string, r io.Reader, opts ...FileOption) (*UploadResult, error) {
	fc := fileOpts(opts)
	size := fc.size
	if size < 0 {
		size = readerSize(r)
	}
	q := url.Values{}
	if err := modeQuery(q, fc.mode); err != nil {
		return nil, err
	}
	body := r
	if fc.progress != nil {
		fc.progress(0, size)
		body = &progressReader{r: r, total: size, fn: fc.progress}
	}
	ctx, _ = c.rpcCtx(ctx, false)
	req, err := http.NewRequestWithContext(ctx, "PUT", c.fileURL("files", p, q), io.NopCloser(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	res := &UploadResult{Size: size, SHA256: resp.Header.Get("X-Sandboxd-Sha256")}
	if n, err := strconv.ParseInt(resp.Header.Get("X-Sandboxd-Size"), 10, 64); err == nil {
		res.Size = n
	}
	return res, nil
}

// UploadFile uploads the local file local to p.
func (c *Client) UploadFile(ctx context.Context, local, p string, opts ...FileOption) (*UploadResult, error) {
	f, err := os.Open(local)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return c.Upload(ctx, p, f, opts...)
}

// WriteFile writes data to p.
func (c *Client) WriteFile(ctx context.Context, p string, data []byte, opts ...FileOption) (*UploadResult, error) {
	return c.Upload(ctx, p, bytes.NewReader(data), opts...)
}

// Download copies the file p to w, streamed; returns the bytes copied. Options: Range,
// WithProgress.
func (c *Client) Download(ctx context.Context, p string, w io.Writer, opts ...FileOption) (int64, error) {
	fc := fileOpts(opts)
	ctx, _ = c.rpcCtx(ctx, false)
	req, err := http.NewRequestWithContext(ctx, "GET", c.fileURL("files", p, nil), nil)
	if err != nil {
		return 0, err
	}
	if fc.offset < 0 {
		return 0, &Error{Code: "INVALID_ARGUMENT", Message: "negative offset"}
	}
	if fc.offset > 0 || fc.length > 0 {
		end := ""
		if fc.length > 0 {
			end = strconv.FormatInt(fc.offset+fc.length-1, 10)
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%s", fc.offset, end))
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return 0, &Error{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf("%q is a directory", p)}
	}
	var body io.Reader = resp.Body
	if fc.progress != nil {
		fc.progress(0, resp.ContentLength)
		body = &progressReader{r: resp.Body, total: resp.ContentLength, fn: fc.progress}
	}
	n, err := io.CopyBuffer(w, body, make([]byte, 1<<20))
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return n, err
		}
		return n, transportError("download "+p, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, &Error{Code: "UNAVAILABLE", Message: fmt.Sprintf("download of %q cut off at %d bytes", p, n)}
	}
	return n, nil
}

// DownloadFile downloads p into the local file local: written to a temp file beside it and
// renamed into place, so a failed download leaves nothing behind.
func (c *Client) DownloadFile(ctx context.Context, p, local string, opts ...FileOption) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".*.part")
	if err != nil {
		return 0, err
	}
	n, err := c.Download(ctx, p, f, opts...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), local)
	}
	if err != nil {
		os.Remove(f.Name())
		return n, err
	}
	return n, nil
}

// ReadFile returns a whole (small) file; ErrInvalidArgument if it is larger than max bytes.
func (c *Client) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	var buf bytes.Buffer
	_, err := c.Download(ctx, p, &capped{w: &buf, left: max})
	return buf.Bytes(), err
}

type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(b []byte) (int, error) {
	if int64(len(b)) > c.left {
		return 0, &Error{Code: "INVALID_ARGUMENT", Message: "file larger than the limit"}
	}
	c.left -= int64(len(b))
	return c.w.Write(b)
}
