package sandboxd_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

func TestUploadDownload(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	data := testdaemon.RandBytes(t, 3<<20+17)
	r, err := c.WriteFile(ctx(t), a+"/a.bin", data, sandboxd.Mode(0o640))
	sum := sha256.Sum256(data)
	if err != nil || r.Size != int64(len(data)) || r.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("%+v %v", r, err)
	}
	st, err := os.Stat(filepath.Join(shared.Root, a, "a.bin"))
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("%v %v", st.Mode(), err)
	}
	local := filepath.Join(t.TempDir(), "src.bin")
	os.WriteFile(local, data[:1000], 0o644)
	if _, err := c.UploadFile(ctx(t), local, a+"/b.bin"); err != nil {
		t.Fatal(err)
	}
	// A reader of unknown size goes chunked.
	pr, pw := io.Pipe()
	go func() { pw.Write(data[:5000]); pw.Close() }()
	if r, err := c.Upload(ctx(t), a+"/c.bin", pr); err != nil || r.Size != 5000 {
		t.Fatalf("%+v %v", r, err)
	}
	var buf bytes.Buffer
	if n, err := c.Download(ctx(t), a+"/a.bin", &buf); err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("%d %v", n, err)
	}
	dst := filepath.Join(t.TempDir(), "out.bin")
	if _, err := c.DownloadFile(ctx(t), a+"/c.bin", dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data[:5000]) {
		t.Fatal("c.bin differs")
	}
	buf.Reset()
	if _, err := c.Download(ctx(t), a+"/a.bin", &buf, sandboxd.Range(1000, 300)); err != nil || !bytes.Equal(buf.Bytes(), data[1000:1300]) {
		t.Fatalf("range: %v", err)
	}
	buf.Reset()
	if _, err := c.Download(ctx(t), a+"/a.bin", &buf, sandboxd.Range(int64(len(data))-10, 0)); err != nil || !bytes.Equal(buf.Bytes(), data[len(data)-10:]) {
		t.Fatalf("range to end: %v", err)
	}
	if _, err := c.Download(ctx(t), a+"/a.bin", io.Discard, sandboxd.Range(1<<40, 0)); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("past the end: %v", err)
	}
	got, err := c.ReadFile(ctx(t), a+"/b.bin", 1000)
	if err != nil || !bytes.Equal(got, data[:1000]) {
		t.Fatal(err)
	}
	if _, err := c.ReadFile(ctx(t), a+"/b.bin", 999); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("cap: %v", err)
	}
}

func TestProgress(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	data := testdaemon.RandBytes(t, 5<<20+3)
	var seen [][2]int64
	rec := sandboxd.WithProgress(func(d, tot int64) { seen = append(seen, [2]int64{d, tot}) })
	if _, err := c.WriteFile(ctx(t), a+"/p", data, rec); err != nil {
		t.Fatal(err)
	}
	n := int64(len(data))
	if seen[0] != [2]int64{0, n} || seen[len(seen)-1] != [2]int64{n, n} || len(seen) < 3 {
		t.Fatalf("upload progress %v", seen)
	}
	seen = nil
	if _, err := c.Download(ctx(t), a+"/p", io.Discard, rec); err != nil {
		t.Fatal(err)
	}
	if seen[0] != [2]int64{0, n} || seen[len(seen)-1] != [2]int64{n, n} {
		t.Fatalf("download progress %v", seen)
	}
}

func TestFailedDownloadLeavesNothing(t *testing.T) {
	c := shared.client(t)
	dir := t.TempDir()
	dst := filepath.Join(dir, "x")
	os.WriteFile(dst, []byte("old"), 0o644)
	if _, err := c.DownloadFile(ctx(t), "no/such/file", dst); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if got, _ := os.ReadFile(dst); len(ents) != 1 || string(got) != "old" {
		t.Fatalf("left %v", ents)
	}
}

func TestStatListMkdirMoveRemove(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	x := ctx(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Mkdir(x, a+"/d1"))
	must(c.Mkdir(x, a+"/d2/deep/er", sandboxd.Parents(), sandboxd.Mode(0o700)))
	if err := c.Mkdir(x, a+"/d1"); !errors.Is(err, sandboxd.ErrConflict) {
		t.Fatal(err)
	}
	if err := c.Mkdir(x, a+"/nope/x"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
	_, err := c.WriteFile(x, a+"/d1/a.txt", []byte("hello"))
	must(err)
	must(os.Symlink("a.txt", filepath.Join(shared.Root, a, "d1", "link")))
	st, err := c.Stat(x, a+"/d1/a.txt")
	must(err)
	if st.Type != "file" || st.Size != 5 || st.Name != "a.txt" || st.Path != "/"+a+"/d1/a.txt" || st.ModTime.IsZero() {
		t.Fatalf("%+v", st)
	}
	if st, _ := c.Stat(x, a+"/d1/link"); st.Type != "symlink" || st.SymlinkTarget != "a.txt" {
		t.Fatalf("%+v", st)
	}
	if st, _ := c.Stat(x, a+"/d2/deep/er"); !st.IsDir() || st.Mode.Perm() != 0o700 {
		t.Fatalf("%+v", st)
	}
	ents, err := c.List(x, a)
	must(err)
	if len(ents) != 2 || ents[0].Name != "d1" || !ents[0].IsDir() || ents[1].Name != "d2" {
		t.Fatalf("%+v", ents)
	}
	if ok, err := c.Exists(x, a+"/d1/a.txt"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := c.Exists(x, a+"/zzz"); ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := c.List(x, a+"/d1/a.txt"); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatal(err)
	}
	must(c.Move(x, a+"/d1/a.txt", a+"/d2/b.txt"))
	c.WriteFile(x, a+"/d1/c.txt", []byte("c"))
	if err := c.Move(x, a+"/d1/c.txt", a+"/d2/b.txt"); !errors.Is(err, sandboxd.ErrConflict) {
		t.Fatal(err)
	}
	must(c.Move(x, a+"/d1/c.txt", a+"/d2/b.txt", sandboxd.Overwrite()))
	if b, _ := c.ReadFile(x, a+"/d2/b.txt", 10); string(b) != "c" {
		t.Fatal(string(b))
	}
	if err := c.Remove(x, a+"/d2"); !errors.Is(err, sandboxd.ErrConflict) {
		t.Fatal(err)
	}
	must(c.Remove(x, a+"/d2", sandboxd.Recursive()))
	if err := c.Remove(x, a+"/d2"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestFileErrorsAreTyped(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	x := ctx(t)
	_, err := c.WriteFile(x, "../escape", []byte("x"))
	var se *sandboxd.Error
	if !errors.Is(err, sandboxd.ErrPermissionDenied) || !errors.As(err, &se) || se.HTTPStatus != 403 {
		t.Fatal(err)
	}
	c.Mkdir(x, a+"/dir")
	if _, err := c.WriteFile(x, a+"/dir", []byte("x")); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatal(err)
	}
	if _, err := c.Download(x, a+"/dir", io.Discard); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatal(err)
	}
	if err := c.Mkdir(x, a+"/m", sandboxd.Mode(0o1777)); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestPayloadTooLarge(t *testing.T) {
	d, err := startDaemon(os.Getenv("SANDBOXD_BIN"), t.TempDir(), "--max-upload-bytes", "1000")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	}()
	c := d.client(t)
	if _, err := c.WriteFile(ctx(t), "x", make([]byte, 1001)); !errors.Is(err, sandboxd.ErrPayloadTooLarge) {
		t.Fatal(err)
	}
	if ok, _ := c.Exists(ctx(t), "x"); ok {
		t.Fatal("left behind")
	}
}

func TestDirectoryTarUpAndDown(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	src := filepath.Join(t.TempDir(), "src")
	testdaemon.MakeTree(t, src)
	var last int64
	n, err := c.UploadDir(ctx(t), src, a+"/up", sandboxd.WithProgress(func(d, _ int64) { last = d }))
	want := testdaemon.Tree(t, src)
	if err != nil || n != len(want) || last < 3<<20 {
		t.Fatalf("%d entries (want %d), %v, progress %d", n, len(want), err, last)
	}
	if got := testdaemon.Tree(t, filepath.Join(shared.Root, a, "up")); !reflect.DeepEqual(got, want) {
		t.Fatalf("uploaded tree differs:\n%v\n%v", got, want)
	}
	dst := filepath.Join(t.TempDir(), "down")
	n, err = c.DownloadDir(ctx(t), a+"/up", dst)
	if err != nil || n != len(want) {
		t.Fatalf("%d %v", n, err)
	}
	if got := testdaemon.Tree(t, dst); !reflect.DeepEqual(got, want) {
		t.Fatalf("downloaded tree differs:\n%v\n%v", got, want)
	}
}

func TestDownloadDirRefusesLinksOut(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	os.WriteFile(filepath.Join(shared.Root, a, "ok.txt"), []byte("ok"), 0o644)
	os.Symlink("/etc", filepath.Join(shared.Root, a, "zz-out"))
	dst := filepath.Join(t.TempDir(), "down")
	if _, err := c.DownloadDir(ctx(t), a, dst); !errors.Is(err, sandboxd.ErrPermissionDenied) {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "zz-out")); !os.IsNotExist(err) {
		t.Fatal("the link was made")
	}
}

func TestHealthMetadataReady(t *testing.T) {
	c := shared.client(t)
	h, err := c.Health(ctx(t))
	if err != nil || h.Status != "ok" {
		t.Fatal(h, err)
	}
	if _, err := c.Metadata(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func withProgress(p sandboxd.Progress) sandboxd.FileOption { return sandboxd.WithProgress(p) }
