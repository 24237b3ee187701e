package sandboxd

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fpb "github.com/sandboxd/sandboxd/sdk/go/internal/filespb"
)

// WatchKind is what a WatchEvent tells.
type WatchKind string

const (
	WatchReady    WatchKind = "ready"    // every directory is watched; ID resumes the watch
	WatchCreate   WatchKind = "create"   // made, or moved into the tree
	WatchWrite    WatchKind = "write"    // modified or closed after writing (unread writes merged)
	WatchChmod    WatchKind = "chmod"    // mode, owner or times
	WatchRemove   WatchKind = "remove"   // removed, or moved out of the tree
	WatchRename   WatchKind = "rename"   // moved within the tree: OldPath -> Path
	WatchOverflow WatchKind = "overflow" // the events numbered LostFrom..LostTo were lost: list again
)

var watchKinds = map[fpb.WatchEventKind]WatchKind{
	fpb.WatchEventKind_WATCH_EVENT_KIND_READY: WatchReady, fpb.WatchEventKind_WATCH_EVENT_KIND_CREATE: WatchCreate,
	fpb.WatchEventKind_WATCH_EVENT_KIND_WRITE: WatchWrite, fpb.WatchEventKind_WATCH_EVENT_KIND_CHMOD: WatchChmod,
	fpb.WatchEventKind_WATCH_EVENT_KIND_REMOVE: WatchRemove, fpb.WatchEventKind_WATCH_EVENT_KIND_RENAME: WatchRename,
	fpb.WatchEventKind_WATCH_EVENT_KIND_OVERFLOW: WatchOverflow,
}

// WatchEvent is one change beneath a watched directory. Seq numbers a watch's events
// consecutively; paths are relative to the watched directory (exact bytes, also when not UTF-8).
type WatchEvent struct {
	Seq     uint64
	Kind    WatchKind
	Path    string
	Dir     bool
	OldPath string // WatchRename
	// WatchOverflow: the sequence numbers lost (inclusive), and why.
	LostFrom, LostTo uint64
	Reason           string
	// WatchReady.
	WatchID     string
	Resumed     bool
	Directories uint64
}

type watchConfig struct {
	req fpb.WatchRequest
}

// WatchOption configures Watch.
type WatchOption func(*watchConfig)

// WatchRecursive watches every directory beneath too (new ones as they come).
func WatchRecursive() WatchOption { return func(w *watchConfig) { w.req.Recursive = true } }

// Include tells only paths matching one of these globs (fnmatch; a glob without '/' matches the
// last name, one with '/' the whole relative path).
func Include(globs ...string) WatchOption {
	return func(w *watchConfig) { w.req.Include = append(w.req.Include, globs...) }
}

// Exclude never tells paths matching these globs; an excluded directory is not watched.
func Exclude(globs ...string) WatchOption {
	return func(w *watchConfig) { w.req.Exclude = append(w.req.Exclude, globs...) }
}

// ResumeWatch resumes the watch of this id (kept by the daemon for --watch-retention after its
// reader went) with the events after since.
func ResumeWatch(id string, since uint64) WatchOption {
	return func(w *watchConfig) { w.req.WatchId, w.req.Since = id, since }
}

// RescanEvery also compares a snapshot of the tree this often (at least 100ms), for changes
// inotify cannot see.
func RescanEvery(d time.Duration) WatchOption {
	return func(w *watchConfig) { w.req.RescanIntervalMs = uint64(d / time.Millisecond) }
}

// Watcher is a running watch: read Events until it is closed, then Err says why it ended (nil
// after Close or the context's end).
type Watcher struct {
	// Events delivers the watch's events in order; closed at the end.
	Events <-chan WatchEvent
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
	id     string
	last   uint64
	done   chan struct{}
}

// Watch watches directory p (sandboxd.v1.Files/Watch). It returns once the daemon has
// accepted the watch; the first event is WatchReady. A client that reads too slowly is told
// what it lost (WatchOverflow), never nothing.
func (c *Client) Watch(ctx context.Context, p string, opts ...WatchOption) (*Watcher, error) {
	wc := &watchConfig{req: fpb.WatchRequest{Path: p}}
	for _, o := range opts {
		o(wc)
	}
	ctx, cancel := context.WithCancel(ctx)
	mctx, _ := c.rpcCtx(ctx, false)
	st, err := c.files.Watch(mctx, &wc.req)
	if err == nil {
		var first *fpb.WatchEvent
		if first, err = st.Recv(); err == nil {
			return c.startWatcher(ctx, cancel, st, first), nil
		}
	}
	cancel()
	if errors.Is(err, io.EOF) {
		err = ErrCanceled
	}
	return nil, grpcError(err)
}

func (c *Client) startWatcher(ctx context.Context, cancel context.CancelFunc, st fpb.Files_WatchClient,
	first *fpb.WatchEvent) *Watcher {
	ch := make(chan WatchEvent, 64)
	w := &Watcher{Events: ch, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(ch)
		for m := first; ; {
			ev := watchEvent(m)
			w.mu.Lock()
			if ev.Kind == WatchReady {
				w.id = ev.WatchID
			}
			w.last = ev.Seq
			w.mu.Unlock()
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			var err error
			if m, err = st.Recv(); err != nil {
				if status.Code(err) != codes.Canceled && ctx.Err() == nil && !errors.Is(err, io.EOF) {
					w.mu.Lock()
					w.err = grpcError(err)
					w.mu.Unlock()
				}
				return
			}
		}
	}()
	return w
}

func watchEvent(m *fpb.WatchEvent) WatchEvent {
	ev := WatchEvent{Seq: m.Seq, Kind: watchKinds[m.Kind], Path: m.Path, Dir: m.Dir}
	if len(m.PathBytes) > 0 {
		ev.Path = string(m.PathBytes)
	}
	switch ev.Kind {
	case WatchRename:
		ev.OldPath = m.From
		if len(m.FromBytes) > 0 {
			ev.OldPath = string(m.FromBytes)
		}
	case WatchOverflow:
		ev.LostFrom, ev.LostTo, ev.Reason = m.Overflow.GetFrom(), m.Overflow.GetTo(), m.Overflow.GetReason()
	case WatchReady:
		ev.WatchID, ev.Resumed, ev.Directories = m.Ready.GetWatchId(), m.Ready.GetResumed(), m.Ready.GetDirectories()
	}
	return ev
}

// ID is the watch's id (from its ready event), for ResumeWatch.
func (w *Watcher) ID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

// LastSeq is the number of the last event delivered: since for ResumeWatch.
func (w *Watcher) LastSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Err is why the watch ended once Events is closed: nil after Close or the context's end, else
// the daemon's error (NotFound: the directory went; ResourceExhausted: a limit; Unavailable:
// the daemon stops; Aborted: another client resumed it).
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the call; the daemon keeps the watch for a resume for --watch-retention.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}
