// Command sbxbench measures a sandboxd-compatible daemon (process.v1.ProcessService) from outside,
// and the local floor that a daemon cannot beat. Each measuring subcommand appends one JSON line
// per measurement to -out (stdout when empty); `sbxbench report` turns those lines into the table.
//
//	sbxbench exec   -addr A -label L -cmd PROG -clients N   Execute latency and calls/s
//	sbxbench rtt    -addr A -label L                        one gRPC round trip (health Check)
//	sbxbench stream -addr A -label L -bytes N               Start streaming throughput
//	sbxbench stdin  -addr A -label L -bytes N               WriteStdin throughput into `wc -c`
//	sbxbench spawn  -cmd PROG                               local spawn+wait latency
//	sbxbench cmd    -label L -- ARGV...                     an external command's latency (ssh)
//	sbxbench pipe   -bytes N                                local raw pipe throughput
//	sbxbench ready  -label L -- DAEMON ARGS...              start-to-ready time and idle RSS
//	sbxbench wait   -addr A                                 wait until a daemon answers
//	sbxbench freeport -n N                                  print N free loopback TCP ports
//	sbxbench report FILE...                                 print the table of ratios
//
// The REST benchmarks (bench/rest.sh; rest*.go):
//
//	sbxbench restput   -url U -label L -bytes N             1 GiB PUT throughput (with the daemon's fsync)
//	sbxbench restget   -url U -label L                      1 GiB GET throughput
//	sbxbench floorput  -dir D -bytes N                      local write+fsync of the same bytes (dd conv=fsync)
//	sbxbench floorget  -file F                              local sendfile loop into a loopback socket
//	sbxbench restsmall -url U -label L -what W              small GETs per second (wrk, or a Go client)
//	sbxbench restreport FILE...                             print the REST table of ratios
//
// The terminal benchmark (bench/terminal.sh; term*.go):
//
//	sbxbench term -transport pty|ws|grpc|procs              keystroke-to-echo round trips and bursts
//	sbxbench termreport FILE...                             print the terminal table
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sbxbench {exec|rtt|stream|stdin|spawn|cmd|pipe|ready|wait|freeport|report|restput|restget|floorput|floorget|restsmall|restreport|term|termreport} [flags]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmds := map[string]func([]string) error{
		"exec":     cmdExec,
		"rtt":      cmdRTT,
		"stream":   cmdStream,
		"stdin":    cmdStdin,
		"spawn":    cmdSpawn,
		"pipe":     cmdPipe,
		"ready":    cmdReady,
		"wait":     cmdWait,
		"freeport": cmdFreePort,
		"report":   cmdReport,
		"cmd":      cmdCmd,

		"restput":    cmdRestPut,
		"restget":    cmdRestGet,
		"floorput":   cmdFloorPut,
		"floorget":   cmdFloorGet,
		"restsmall":  cmdRestSmall,
		"restreport": cmdRestReport,

		"term":       cmdTerm,
		"termreport": cmdTermReport,
	}
	fn, ok := cmds[os.Args[1]]
	if !ok {
		usage()
	}
	if err := fn(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "sbxbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// emit appends one measurement as a JSON line to path (stdout when empty).
func emit(path string, rec map[string]any) error {
	rec["time"] = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}
