package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
)

// termAgg pools one (label, transport)'s records over the rounds.
type termAgg struct {
	keys, bursts []float64
	cpu, csw     []float64 // per run: daemon µs and context switches a key
	burstKeys    int
	runs         int
}

func (a *termAgg) add(r map[string]any) {
	for _, k := range []struct {
		name string
		to   *[]float64
	}{{"samples_us", &a.keys}, {"burst_us", &a.bursts}} {
		xs, _ := r[k.name].([]any)
		for _, x := range xs {
			if f, ok := x.(float64); ok {
				*k.to = append(*k.to, f)
			}
		}
	}
	if v := num(r["daemon_us_per_key"]); !math.IsNaN(v) {
		a.cpu = append(a.cpu, v)
		a.csw = append(a.csw, num(r["daemon_csw_per_key"]))
	}
	a.burstKeys = int(num(r["burst_keys"]))
	a.runs++
}

// cmdTermReport prints the terminal table from the records of bench/terminal.sh: percentiles
// of every round's keystrokes pooled, the median burst, ratios to the floor and across paths.
func cmdTermReport(args []string) error {
	fs := flag.NewFlagSet("termreport", flag.ExitOnError)
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("no result files")
	}
	agg := map[string]*termAgg{} // label|transport
	for _, p := range fs.Args() {
		if err := termLoad(p, agg); err != nil {
			return err
		}
	}
	get := func(k string) *termAgg {
		if agg[k] == nil {
			return &termAgg{}
		}
		return agg[k]
	}
	floor, ws, gro, grr, procs := get("local|pty"), get("ours|ws"), get("ours|grpc"), get("ref|grpc"), get("ours|procs")
	fl := summarize(floor.keys)
	p50 := func(a *termAgg) float64 { return summarize(a.keys).p50 }
	p99 := func(a *termAgg) float64 { return summarize(a.keys).p99 }
	pp := func(a *termAgg) string { return f1(p50(a)) + " / " + f1(p99(a)) }
	burst := func(a *termAgg) float64 { return summarize(a.bursts).p50 / 1000 }
	bursts := func(a *termAgg) string { // p50 / p90 ms
		st := summarize(a.bursts)
		return f2(st.p50/1000) + " / " + f2(st.p90/1000)
	}
	bn := max(floor.burstKeys, ws.burstKeys, gro.burstKeys)
	const wsName = "WebSocket (`/v1/processes/{id}/terminal`, a frame a key)"
	const grpcName = "gRPC process.v1 (Start with a pty, a WriteStdin call a key)"
	const procsName = "gRPC sandboxd.v1.Processes (Spawn with a pty, Attach, a WriteStdin call a key)"

	var rows []row
	add := func(r row) { rows = append(rows, r) }
	add(row{what: "keystroke to echo, " + wsName + ": p50 µs vs floor (local pty echo)",
		ours: f1(p50(ws)), base: f1(fl.p50), ratio: ratio(p50(ws) / fl.p50), target: "—", verdict: "info"})
	add(row{what: "keystroke to echo, WebSocket: p99 µs vs floor",
		ours: f1(p99(ws)), base: f1(fl.p99), ratio: ratio(p99(ws) / fl.p99), target: "—", verdict: "info"})
	add(row{what: fmt.Sprintf("keystroke to echo, %s: p50 µs vs floor (the reference: %s)", grpcName, ratio(p50(grr)/fl.p50)),
		ours: f1(p50(gro)), ref: f1(p50(grr)), base: f1(fl.p50), ratio: ratio(p50(gro) / fl.p50), target: "—", verdict: "info"})
	add(row{what: "keystroke to echo, gRPC process.v1: p50 / p99 µs vs reference",
		ours: pp(gro), ref: pp(grr), base: pp(floor), ratio: ratio(p50(gro) / p50(grr)), target: "—", verdict: "info"})
	add(row{what: "keystroke to echo on ours, p50 µs: WebSocket / gRPC process.v1 (ratio: WebSocket over gRPC)",
		ours: f1(p50(ws)) + " / " + f1(p50(gro)), ratio: ratio(p50(ws) / p50(gro)), target: "—", verdict: "info"})
	add(row{what: "keystroke to echo, " + procsName + ": p50 / p99 µs vs floor",
		ours: pp(procs), base: pp(floor), ratio: ratio(p50(procs) / fl.p50), target: "—", verdict: "info"})
	add(row{what: fmt.Sprintf("%d keys typed as fast as the path takes them, until the last echo, p50 / p90 ms: WebSocket vs floor", bn),
		ours: bursts(ws), base: bursts(floor), ratio: ratio(burst(ws) / burst(floor)), target: "—", verdict: "info"})
	add(row{what: fmt.Sprintf("%d keys, until the last echo, p50 / p90 ms: gRPC process.v1 (one call after another, as `sbx shell`) vs reference", bn),
		ours: bursts(gro), ref: bursts(grr), base: bursts(floor), ratio: ratio(burst(gro) / burst(grr)), target: "—", verdict: "info"})
	add(row{what: fmt.Sprintf("%d keys, until the last echo, p50 / p90 ms: sandboxd.v1.Processes vs floor", bn),
		ours: bursts(procs), base: bursts(floor), ratio: ratio(burst(procs) / burst(floor)), target: "—", verdict: "info"})
	cpu := func(a *termAgg) string {
		if len(a.cpu) == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s µs, %.1f cs", f1(median(a.cpu)), median(a.csw))
	}
	add(row{what: "daemon CPU and context switches a key (newlines included), WebSocket",
		ours: cpu(ws), target: "—", verdict: "info"})
	add(row{what: "daemon CPU and context switches a key (newlines included), gRPC process.v1",
		ours: cpu(gro), ref: cpu(grr), ratio: ratio(median(gro.cpu) / median(grr.cpu)), target: "—", verdict: "info"})
	add(row{what: "daemon CPU and context switches a key (newlines included), sandboxd.v1.Processes",
		ours: cpu(procs), target: "—", verdict: "info"})
	printTable(rows)
	fmt.Printf("\nPercentiles of every run's keys, and of every run's bursts, pooled (runs: floor %d, WebSocket %d, gRPC ours %d, reference %d, Processes %d; keys: %d, %d, %d, %d, %d; bursts: %d each).\n",
		floor.runs, ws.runs, gro.runs, grr.runs, procs.runs, len(floor.keys), len(ws.keys), len(gro.keys), len(grr.keys), len(procs.keys), len(ws.bursts))
	return nil
}

func f2(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

func termLoad(p string, agg map[string]*termAgg) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if str(r["kind"]) != "term" {
			continue
		}
		k := strings.Join([]string{str(r["label"]), str(r["transport"])}, "|")
		if agg[k] == nil {
			agg[k] = &termAgg{}
		}
		agg[k].add(r)
	}
	return sc.Err()
}
