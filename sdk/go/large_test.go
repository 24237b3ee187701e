package sandboxd_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

// vmHWM is this process's peak resident set size in KiB.
func vmHWM(t testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func fileSum(t testing.TB, p string) string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// TestLargeTransferFlatMemory moves SANDBOXD_SDK_LARGE_MIB (default 1024) MiB up and down and
// checks that the peak RSS of the test process grows by less than 64 MiB.
func TestLargeTransferFlatMemory(t *testing.T) {
	mib := 1024
	if v := os.Getenv("SANDBOXD_SDK_LARGE_MIB"); v != "" {
		mib, _ = strconv.Atoi(v)
	}
	size := int64(mib) << 20
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	chunk := testdaemon.RandBytes(t, 1<<20)
	for i := 0; i < mib; i++ {
		binary.LittleEndian.PutUint64(chunk, uint64(i))
		f.Write(chunk)
	}
	f.Close()
	debug.FreeOSMemory()
	c := shared.client(t)
	c.WriteFile(ctx(t), "warm", []byte("x"))
	base := vmHWM(t)
	var calls int
	prog := func(int64, int64) { calls++ }
	up, err := c.UploadFile(ctx(t), src, "large.bin", withProgress(prog))
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(shared.Root, "large.bin"))
	want := fileSum(t, src)
	if up.SHA256 != want || up.Size != size {
		t.Fatalf("uploaded %+v, want %s", up, want)
	}
	dst := filepath.Join(dir, "dst.bin")
	n, err := c.DownloadFile(ctx(t), "large.bin", dst, withProgress(prog))
	if err != nil || n != size || fileSum(t, dst) != want {
		t.Fatalf("downloaded %d: %v", n, err)
	}
	end := vmHWM(t)
	t.Logf("%d MiB up and down; peak RSS %d KiB before, %d KiB after", mib, base, end)
	if end-base > 64<<10 {
		t.Fatalf("client memory grew by %d KiB", end-base)
	}
	if calls < mib {
		t.Fatalf("progress called %d times", calls)
	}
}
