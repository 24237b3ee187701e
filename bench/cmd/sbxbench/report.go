package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

type stats struct {
	n                        int
	p50, p90, p99, mean, min float64
}

// summarize computes nearest-rank percentiles of samples.
func summarize(s []float64) stats {
	if len(s) == 0 {
		return stats{p50: math.NaN(), p90: math.NaN(), p99: math.NaN(), mean: math.NaN(), min: math.NaN()}
	}
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(c)))) - 1
		return c[max(0, min(i, len(c)-1))]
	}
	sum := 0.0
	for _, x := range c {
		sum += x
	}
	return stats{n: len(c), p50: pct(0.50), p90: pct(0.90), p99: pct(0.99), mean: sum / float64(len(c)), min: c[0]}
}

func median(s []float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// latAgg pools the samples and counts of one latency configuration over every round.
type latAgg struct {
	samples    []float64
	completed  float64
	window     float64
	errors     float64
	clientCPU  float64
	daemonCPU  float64
	daemonCSW  float64
	firstError string
}

func (a *latAgg) add(r map[string]any) {
	xs, _ := r["samples_us"].([]any) // null when no call succeeded
	for _, x := range xs {
		if f, ok := x.(float64); ok {
			a.samples = append(a.samples, f)
		}
	}
	a.completed += num(r["completed"])
	a.window += num(r["window_s"])
	a.errors += num(r["errors"])
	a.clientCPU += num(r["client_cpu"])
	a.daemonCPU += num(r["daemon_cpu"])
	a.daemonCSW += num(r["daemon_csw"])
	if e, ok := r["first_error"].(string); ok && a.firstError == "" {
		a.firstError = e
	}
}

func (a *latAgg) rate() float64 {
	if a == nil || a.window == 0 {
		return math.NaN()
	}
	return a.completed / a.window
}

func (a *latAgg) st() stats {
	if a == nil {
		return summarize(nil)
	}
	return summarize(a.samples)
}

func num(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return math.NaN()
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprintf("%g", x)
	}
	return ""
}

type results struct {
	exec   map[string]*latAgg // label|prog|clients
	rtt    map[string]*latAgg // label|method
	spawn  map[string]*latAgg // prog
	stream map[string][]map[string]any
	pipe   []map[string]any
	ready  map[string][]map[string]any
	failed []string
}

func load(paths []string) (*results, error) {
	res := &results{exec: map[string]*latAgg{}, rtt: map[string]*latAgg{}, spawn: map[string]*latAgg{},
		stream: map[string][]map[string]any{}, ready: map[string][]map[string]any{}}
	get := func(m map[string]*latAgg, k string) *latAgg {
		if m[k] == nil {
			m[k] = &latAgg{}
		}
		return m[k]
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			var r map[string]any
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			label := str(r["label"])
			switch r["kind"] {
			case "exec":
				k := label + "|" + str(r["prog"]) + "|" + str(r["clients"])
				if num(r["errors"]) > 0 {
					// A round with failed calls (a daemon that crashed, say) is not pooled: its
					// window holds fewer calls than the daemon could serve.
					res.failed = append(res.failed, fmt.Sprintf("exec %s: a round with %v failed calls left out (first: %s)",
						k, r["errors"], str(r["first_error"])))
					continue
				}
				get(res.exec, k).add(r)
			case "rtt":
				m := str(r["method"])
				if m == "" {
					m = "health"
				}
				get(res.rtt, label+"|"+m).add(r)
			case "spawn":
				if str(r["clients"]) == "1" {
					get(res.spawn, str(r["prog"])).add(r)
				}
			case "stream":
				k := label + "|" + str(r["chunk"])
				res.stream[k] = append(res.stream[k], r)
			case "pipe":
				res.pipe = append(res.pipe, r)
			case "ready":
				res.ready[label] = append(res.ready[label], r)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func field(rs []map[string]any, k string) []float64 {
	var out []float64
	for _, r := range rs {
		if v := num(r[k]); !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

type row struct {
	what, ours, ref, base, ratio, target, verdict string
}

func f1(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	if math.Abs(x) >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

func ratio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", x)
}

// verdict: le means the ratio must be at most target, else at least.
func verdict(r, target float64, le bool) string {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0):
		return "n/a"
	case le && r <= target, !le && r >= target:
		return "PASS"
	}
	return "FAIL"
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	ours := fs.String("ours", "ours", "label of our daemon")
	ref := fs.String("ref", "ref", "label of the reference daemon")
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("no result files")
	}
	res, err := load(fs.Args())
	if err != nil {
		return err
	}
	var rows []row
	add := func(r row) { rows = append(rows, r) }
	rttO, rttR := res.rtt[*ours+"|health"].st().p50, res.rtt[*ref+"|health"].st().p50

	for _, prog := range []string{"true", "noop"} {
		name := map[string]string{"true": "/bin/true", "noop": "static no-op"}[prog]
		e1o, e1r := res.exec[*ours+"|"+prog+"|1"], res.exec[*ref+"|"+prog+"|1"]
		e16o, e16r := res.exec[*ours+"|"+prog+"|16"], res.exec[*ref+"|"+prog+"|16"]
		sp := res.spawn[prog].st().p50
		floorO, floorR := sp+rttO, sp+rttR
		so, sr := e1o.st(), e1r.st()
		add(row{what: fmt.Sprintf("Execute %s, 1 client: p50 µs vs floor (spawn+wait %s + RPC)", name, f1(sp)),
			ours: f1(so.p50), ref: f1(sr.p50), base: fmt.Sprintf("%s / %s", f1(floorO), f1(floorR)),
			ratio: ratio(so.p50 / floorO), target: "≤ 1.15×", verdict: verdict(so.p50/floorO, 1.15, true)})
		oO, oR := so.p50-floorO, sr.p50-floorR
		add(row{what: fmt.Sprintf("Execute %s: daemon overhead per call, p50 − floor, µs", name),
			ours: f1(oO), ref: f1(oR), base: "", ratio: ratio(oO / oR), target: "≤ 0.33×", verdict: verdict(oO/oR, 1.0/3, true)})
		add(row{what: fmt.Sprintf("Execute %s, 1 client: p99 µs", name),
			ours: f1(so.p99), ref: f1(sr.p99), ratio: ratio(so.p99 / sr.p99), target: "—", verdict: "info"})
		add(row{what: fmt.Sprintf("Execute %s, 1 client: calls/s", name),
			ours: f1(e1o.rate()), ref: f1(e1r.rate()), base: f1(1e6 / floorO), ratio: ratio(e1o.rate() / e1r.rate()), target: "—", verdict: "info"})
		add(row{what: fmt.Sprintf("Execute %s, 16 clients: calls/s", name),
			ours: f1(e16o.rate()), ref: f1(e16r.rate()), ratio: ratio(e16o.rate() / e16r.rate()), target: "≥ 1.2×", verdict: verdict(e16o.rate()/e16r.rate(), 1.2, false)})
		perCall := func(a *latAgg) string {
			if a == nil || a.completed == 0 {
				return "n/a"
			}
			return fmt.Sprintf("%s µs, %s cs", f1(a.daemonCPU*1e6/a.completed), f1(a.daemonCSW/a.completed))
		}
		add(row{what: fmt.Sprintf("Execute %s, 1 client: daemon CPU and context switches per call", name),
			ours: perCall(e1o), ref: perCall(e1r), ratio: ratio(e1o.daemonCPU / e1o.completed / (e1r.daemonCPU / e1r.completed)), target: "—", verdict: "info"})
		s16o, s16r := e16o.st(), e16r.st()
		add(row{what: fmt.Sprintf("Execute %s, 16 clients: p50 / p99 µs", name),
			ours: f1(s16o.p50) + " / " + f1(s16o.p99), ref: f1(s16r.p50) + " / " + f1(s16r.p99), ratio: ratio(s16o.p50 / s16r.p50), target: "—", verdict: "info"})
	}
	add(row{what: "floor part: one gRPC round trip, health Check (the reference: UNIMPLEMENTED), p50 µs", ours: f1(rttO), ref: f1(rttR), ratio: ratio(rttO / rttR), target: "—", verdict: "info"})
	if u := res.rtt[*ours+"|unknown"]; u != nil {
		uO, uR := u.st().p50, res.rtt[*ref+"|unknown"].st().p50
		add(row{what: "gRPC stacks alone: unknown method (UNIMPLEMENTED on both), p50 µs", ours: f1(uO), ref: f1(uR), ratio: ratio(uO / uR), target: "—", verdict: "info"})
	}

	pipe := median(field(res.pipe, "mb_per_s"))
	chunks := []string{"default"}
	for k := range res.stream {
		if c := strings.SplitN(k, "|", 2)[1]; c != "default" && !contains(chunks, c) {
			chunks = append(chunks, c)
		}
	}
	sort.Slice(chunks[1:], func(i, j int) bool { return chunks[1+i] > chunks[1+j] })
	for _, c := range chunks {
		so, sr := res.stream[*ours+"|"+c], res.stream[*ref+"|"+c]
		mo, mr := median(field(so, "mb_per_s")), median(field(sr, "mb_per_s"))
		desc := "each daemon's default chunk size"
		tgt, tv := "≥ 2×", 2.0
		if c != "default" {
			desc = "both at --stream-chunk-size " + c
			tgt, tv = "≥ 1.2×", 1.2
		}
		size := sizeName(median(field(append(append([]map[string]any{}, so...), sr...), "want_bytes")))
		add(row{what: fmt.Sprintf("Start %s, %s: MB/s vs raw pipe", size, desc), ours: f1(mo), ref: f1(mr), base: f1(pipe),
			ratio: ratio(mo / pipe), target: "≥ 0.6×", verdict: verdict(mo/pipe, 0.6, false)})
		add(row{what: fmt.Sprintf("Start %s, %s: MB/s vs reference", size, desc), ours: f1(mo), ref: f1(mr),
			ratio: ratio(mo / mr), target: tgt, verdict: verdict(mo/mr, tv, false)})
		no, nr := median(field(so, "daemon_ns_per_byte")), median(field(sr, "daemon_ns_per_byte"))
		cs := func(rs []map[string]any) string {
			v := median(field(rs, "daemon_csw_per_msg"))
			if math.IsNaN(v) {
				return ""
			}
			return fmt.Sprintf(", %.1f cs/msg", v)
		}
		add(row{what: fmt.Sprintf("Start %s, %s: daemon CPU ns/byte, context switches/message (avg chunk %s / %s B)", size, desc,
			f1(median(field(so, "avg_chunk"))), f1(median(field(sr, "avg_chunk")))),
			ours: fmt.Sprintf("%.2f%s", no, cs(so)), ref: fmt.Sprintf("%.2f%s", nr, cs(sr)), ratio: ratio(no / nr), target: "—", verdict: "info"})
	}
	ro, rr := res.ready[*ours], res.ready[*ref]
	rssO, rssR := median(field(ro, "rss_kb"))/1024, median(field(rr, "rss_kb"))/1024
	add(row{what: fmt.Sprintf("idle RSS MiB (anon %s / %s MiB)", f1(median(field(ro, "rss_anon_kb"))/1024), f1(median(field(rr, "rss_anon_kb"))/1024)),
		ours: f1(rssO), ref: f1(rssR), ratio: ratio(rssO / rssR), target: "≤ 0.5×", verdict: verdict(rssO/rssR, 0.5, true)})
	rdO, rdR := median(field(ro, "ready_ms")), median(field(rr, "ready_ms"))
	add(row{what: "start-to-ready ms (spawn to first answered call)", ours: f1(rdO), ref: f1(rdR), ratio: ratio(rdO / rdR), target: "—", verdict: "info"})

	printTable(rows)
	// What would make a figure suspect.
	notes := append([]string(nil), res.failed...)
	for k, a := range res.exec {
		if a.errors > 0 {
			notes = append(notes, fmt.Sprintf("exec %s: %v errors (first: %s)", k, a.errors, a.firstError))
		}
		if a.window > 0 && a.clientCPU/a.window > 0.8 {
			notes = append(notes, fmt.Sprintf("exec %s: the client used %.0f%% of a core", k, 100*a.clientCPU/a.window))
		}
	}
	for k, rs := range res.stream {
		for _, r := range rs {
			if r["verified"] != true {
				notes = append(notes, fmt.Sprintf("stream %s: byte count NOT verified (%v of %v)", k, r["bytes"], r["want_bytes"]))
			}
		}
	}
	sort.Strings(notes)
	fmt.Printf("\nSamples: exec/rtt/spawn pooled over rounds (nearest-rank percentiles); streams, pipe, ready: median of runs.\n")
	fmt.Printf("floor = local spawn+wait p50 + that daemon's health-Check round trip p50 (ours / reference). Streamed byte counts verified: %v.\n", len(notes) == 0 || !anyPrefix(notes, "stream"))
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	return nil
}

func sizeName(b float64) string {
	switch {
	case math.IsNaN(b):
		return "?"
	case b >= 1<<30 && math.Mod(b, 1<<30) == 0:
		return fmt.Sprintf("%.0f GiB", b/(1<<30))
	case b >= 1<<20 && math.Mod(b, 1<<20) == 0:
		return fmt.Sprintf("%.0f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.0f B", b)
}

func anyPrefix(s []string, p string) bool {
	for _, x := range s {
		if strings.HasPrefix(x, p) {
			return true
		}
	}
	return false
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func printTable(rows []row) {
	head := row{"measure", "ours", "reference", "floor / pipe", "ratio", "target", "result"}
	all := append([]row{head}, rows...)
	w := make([]int, 7)
	cells := func(r row) []string { return []string{r.what, r.ours, r.ref, r.base, r.ratio, r.target, r.verdict} }
	for _, r := range all {
		for i, c := range cells(r) {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	line := func(c []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, s := range c {
			pad := w[i] - len([]rune(s))
			if i == 0 {
				b.WriteString(" " + s + strings.Repeat(" ", pad) + " |")
			} else {
				b.WriteString(" " + strings.Repeat(" ", pad) + s + " |")
			}
		}
		fmt.Println(b.String())
	}
	line(cells(head))
	sep := make([]string, 7)
	for i := range sep {
		sep[i] = strings.Repeat("-", w[i])
		if i > 0 {
			sep[i] = sep[i][:w[i]-1] + ":"
		}
	}
	line(sep)
	for _, r := range rows {
		line(cells(r))
	}
}
