package sandboxd_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// next is the watcher's next event, at most 30 s away.
func next(t *testing.T, w *sandboxd.Watcher) sandboxd.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events:
		if !ok {
			t.Fatalf("the watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	return sandboxd.WatchEvent{}
}

func until(t *testing.T, w *sandboxd.Watcher, kind sandboxd.WatchKind, path string) []sandboxd.WatchEvent {
	t.Helper()
	var got []sandboxd.WatchEvent
	for {
		ev := next(t, w)
		got = append(got, ev)
		if ev.Kind == kind && ev.Path == path {
			return got
		}
	}
}

func TestWatch(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	a := area(t)
	root := filepath.Join(shared.Root, a)
	w, err := c.Watch(x, a, sandboxd.WatchRecursive(), sandboxd.Exclude("*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Kind != sandboxd.WatchReady || ev.Seq != 0 || ev.WatchID == "" || w.ID() != ev.WatchID {
		t.Fatalf("%+v", ev)
	}
	must(t, os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "d", "e", "x.tmp"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "d", "e", "f"), []byte("x"), 0o644))
	evs := until(t, w, sandboxd.WatchCreate, "d/e/f") // d/e is watched by now: the move away is seen
	must(t, os.Rename(filepath.Join(root, "d", "e", "f"), filepath.Join(root, "g")))
	evs = append(evs, until(t, w, sandboxd.WatchRename, "g")...)
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) || ev.Path == "d/e/x.tmp" {
			t.Fatalf("event %d: %+v", i, evs)
		}
	}
	if evs[0].Kind != sandboxd.WatchCreate || evs[0].Path != "d" || !evs[0].Dir || evs[len(evs)-1].OldPath != "d/e/f" {
		t.Fatalf("%+v", evs)
	}
	id, last := w.ID(), w.LastSeq()
	w.Close()
	if w.Err() != nil {
		t.Fatal(w.Err())
	}
	must(t, os.WriteFile(filepath.Join(root, "later"), nil, 0o644))
	w, err = c.Watch(x, "", sandboxd.ResumeWatch(id, last))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ev := next(t, w); ev.Kind != sandboxd.WatchReady || !ev.Resumed || ev.Seq != last {
		t.Fatalf("%+v", ev)
	}
	if ev := next(t, w); ev != (sandboxd.WatchEvent{Seq: last + 1, Kind: sandboxd.WatchCreate, Path: "later"}) {
		t.Fatalf("%+v", ev)
	}
}

func TestWatchErrors(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	if _, err := c.Watch(x, area(t)+"/missing"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := c.Watch(x, "../.."); !errors.Is(err, sandboxd.ErrPermissionDenied) {
		t.Fatal(err)
	}
	if _, err := c.Watch(x, "", sandboxd.ResumeWatch("0000000000000000", 0)); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
