package testdaemon

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// RandBytes is n random bytes.
func RandBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Entry is what Tree records of a path.
type Entry struct {
	Kind string
	Mode fs.FileMode
	Link string
	Sum  string
	Time int64
}

// Tree describes every path below root: kind, mode, link target, content hash, mtime.
func Tree(t testing.TB, root string) map[string]Entry {
	out := map[string]Entry{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, _ := d.Info()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = Entry{Kind: "link", Link: l}
		case info.IsDir():
			out[rel] = Entry{Kind: "dir", Mode: info.Mode().Perm()}
		default:
			b, _ := os.ReadFile(p)
			s := sha256.Sum256(b)
			out[rel] = Entry{Kind: "file", Mode: info.Mode().Perm(), Sum: hex.EncodeToString(s[:]), Time: info.ModTime().Unix()}
		}
		return nil
	})
	return out
}

// MakeTree makes a tree with nested and empty directories, modes, a symlink, odd names and
// a 3 MiB file below base.
func MakeTree(t testing.TB, base string) {
	os.MkdirAll(filepath.Join(base, "a/b/c"), 0o755)
	os.Mkdir(filepath.Join(base, "empty"), 0o700)
	os.WriteFile(filepath.Join(base, "top.txt"), []byte("top"), 0o644)
	os.WriteFile(filepath.Join(base, "a/exec.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(base, "a/b/c/big.bin"), RandBytes(t, 3<<20), 0o600)
	os.WriteFile(filepath.Join(base, "a/b/odd name ü.txt"), []byte("u"), 0o644)
	os.Symlink("../top.txt", filepath.Join(base, "a/to-top"))
	for i := 0; i < 50; i++ {
		os.WriteFile(filepath.Join(base, fmt.Sprintf("a/b/f%03d", i)), RandBytes(t, i*100), 0o644)
	}
	os.Chmod(filepath.Join(base, "empty"), 0o700)
}
