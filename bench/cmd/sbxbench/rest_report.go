package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// cmdRestReport prints the REST table from the records of bench/rest.sh: medians over the rounds,
// ratios, PASS/FAIL against the targets of issue 3.
func cmdRestReport(args []string) error {
	fs := flag.NewFlagSet("restreport", flag.ExitOnError)
	ours := fs.String("ours", "ours", "label of our daemon")
	ref := fs.String("ref", "ref", "label of the reference daemon")
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("no result files")
	}
	recs := map[string][]map[string]any{} // kind|label[|what]
	var notes []string
	for _, p := range fs.Args() {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var r map[string]any
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", p, err)
			}
			k := str(r["kind"]) + "|" + str(r["label"])
			if w := str(r["what"]); w != "" {
				k += "|" + w
			}
			if !strings.HasPrefix(k, "rest_") && !strings.HasPrefix(k, "floor_") && !strings.HasPrefix(k, "dd_") {
				continue
			}
			if r["verified"] == false {
				notes = append(notes, fmt.Sprintf("%s: byte count or content NOT verified (%v of %v): left out", k, r["bytes"], r["want_bytes"]))
				continue
			}
			if num(r["errors"]) > 0 {
				notes = append(notes, fmt.Sprintf("%s: a run with %v errors (%v)", k, r["errors"], r["errors_by_kind"]))
			}
			recs[k] = append(recs[k], r)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	med := func(k, f string) float64 { return median(field(recs[k], f)) }
	per := func(k, f string) string { // every round's value, in order, for the notes
		var s []string
		for _, x := range field(recs[k], f) {
			s = append(s, f1(x))
		}
		return strings.Join(s, ", ")
	}
	var rows []row
	add := func(r row) { rows = append(rows, r) }

	for _, x := range []struct{ kind, floorKind, name, floorName string }{
		{"rest_put", "floor_put", "Upload (PUT, daemon fsyncs)", "write+fsync loop"},
		{"rest_get", "floor_get", "Download (GET, page cache warm)", "sendfile loop"},
	} {
		ko, kr, kf := x.kind+"|"+*ours, x.kind+"|"+*ref, x.floorKind+"|local"
		mo, mr, mf := med(ko, "mb_per_s"), med(kr, "mb_per_s"), med(kf, "mb_per_s")
		size := sizeName(median(field(append(append([]map[string]any{}, recs[ko]...), recs[kr]...), "want_bytes")))
		add(row{what: fmt.Sprintf("%s %s: MB/s vs floor (%s; the reference: %s)", x.name, size, x.floorName, ratio(mr/mf)),
			ours: f1(mo), ref: f1(mr), base: f1(mf), ratio: ratio(mo / mf), target: "≥ 0.8×", verdict: verdict(mo/mf, 0.8, false)})
		add(row{what: fmt.Sprintf("%s %s: MB/s vs reference", x.name, size),
			ours: f1(mo), ref: f1(mr), ratio: ratio(mo / mr), target: "≥ 1.2×", verdict: verdict(mo/mr, 1.2, false)})
		cpu := func(k string) string {
			c, cs := med(k, "daemon_cpu_s_per_gib"), med(k, "daemon_csw_per_mib")
			return fmt.Sprintf("%.2f s, %s cs", c, f1(cs))
		}
		add(row{what: fmt.Sprintf("%s: daemon CPU s per GiB, context switches per MiB", x.name),
			ours: cpu(ko), ref: cpu(kr), ratio: ratio(med(ko, "daemon_cpu_s_per_gib") / med(kr, "daemon_cpu_s_per_gib")), target: "—", verdict: "info"})
		notes = append(notes, fmt.Sprintf("%s MB/s per run: ours %s; reference %s; floor %s", x.kind, per(ko, "mb_per_s"), per(kr, "mb_per_s"), per(kf, "mb_per_s")))
		if x.kind == "rest_put" {
			add(row{what: "Upload: s from the last body byte to the answer (fsync, rename; floor: fsync+close+rename)",
				ours: fmt.Sprintf("%.2f", med(ko, "tail_s")), ref: fmt.Sprintf("%.2f", med(kr, "tail_s")), base: fmt.Sprintf("%.2f", med(kf, "tail_s")),
				ratio: ratio(med(ko, "tail_s") / med(kr, "tail_s")), target: "—", verdict: "info"})
			if d := recs["dd_put|local"]; len(d) > 0 {
				md := med("dd_put|local", "mb_per_s")
				add(row{what: "  dd if=/dev/zero bs=1M conv=fsync, same size and fs, MB/s (ours vs it)", ours: f1(mo), ref: f1(mr), base: f1(md),
					ratio: ratio(mo / md), target: "—", verdict: "info"})
				notes = append(notes, fmt.Sprintf("dd_put MB/s per run: %s", per("dd_put|local", "mb_per_s")))
			}
		}
	}
	for _, w := range []struct{ what, name string }{{"file", "GET /v1/files/small.txt (100 B)"}, {"health", "GET /v1/health"}} {
		ko, kr := "rest_small|"+*ours+"|"+w.what, "rest_small|"+*ref+"|"+w.what
		if len(recs[ko]) == 0 && len(recs[kr]) == 0 {
			continue
		}
		tool, conns := "", ""
		for _, r := range append(recs[ko], recs[kr]...) {
			tool, conns = str(r["tool"]), str(r["conns"])
			if t := str(r["threads"]); t != "" && tool == "wrk" {
				tool = fmt.Sprintf("wrk -t%s", t)
			}
		}
		ro, rr := med(ko, "req_per_s"), med(kr, "req_per_s")
		add(row{what: fmt.Sprintf("%s: requests/s (%s, %s keep-alive conns)", w.name, tool, conns),
			ours: f1(ro), ref: f1(rr), ratio: ratio(ro / rr), target: "≥ 1.2×", verdict: verdict(ro/rr, 1.2, false)})
		pp := func(k string) string { return f1(med(k, "p50_us")) + " / " + f1(med(k, "p99_us")) }
		add(row{what: fmt.Sprintf("%s: latency p50 / p99 µs", w.name),
			ours: pp(ko), ref: pp(kr), ratio: ratio(med(ko, "p50_us") / med(kr, "p50_us")), target: "—", verdict: "info"})
		cpr := func(k string) string {
			return fmt.Sprintf("%s µs, %.2f cs", f1(med(k, "daemon_us_per_req")), med(k, "daemon_csw_per_req"))
		}
		add(row{what: fmt.Sprintf("%s: daemon CPU and context switches per request", w.name),
			ours: cpr(ko), ref: cpr(kr), ratio: ratio(med(ko, "daemon_us_per_req") / med(kr, "daemon_us_per_req")), target: "—", verdict: "info"})
		notes = append(notes, fmt.Sprintf("small %s req/s per run: ours %s; reference %s", w.what, per(ko, "req_per_s"), per(kr, "req_per_s")))
	}
	printTable(rows)
	fmt.Printf("\nThroughput in MB/s = 10^6 B/s, median of the runs; small requests: median of the runs' req/s and percentiles.\n")
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	return nil
}
