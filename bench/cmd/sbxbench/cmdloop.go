package main

import (
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// cmdCmd times an external command in a closed loop: what people run instead of a daemon's
// Execute (ssh over a shared connection, for one). Its stdio is /dev/null; it must exit 0.
//
//	sbxbench cmd -label ssh -name /bin/true -- ssh -S ctl host /bin/true
func cmdCmd(args []string) error {
	fs := flag.NewFlagSet("cmd", flag.ExitOnError)
	label := fs.String("label", "", "name of the tool in the report (ssh)")
	name := fs.String("name", "", "short name of what the command runs (default: the command)")
	clients := fs.Int("clients", 1, "concurrent clients (closed loop)")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "unrecorded warm-up")
	duration := fs.Duration("duration", 2*time.Second, "recorded window")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 {
		return fmt.Errorf("no command after the flags")
	}
	if *name == "" {
		*name = strings.Join(argv, " ")
	}
	res := closedLoop(*clients, *warmup, *duration, 0, func(int) error {
		c := exec.Command(argv[0], argv[1:]...)
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		return nil
	})
	rec := res.record("cmd", *label)
	rec["prog"] = *name
	rec["clients"] = *clients
	rec["what"] = fmt.Sprintf("%s: %s c=%d", *label, *name, *clients)
	progress(rec)
	delete(rec, "what")
	return emit(*out, rec)
}
