package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

var (
	sbxBin string
	d      *testdaemon.Daemon
)

// TestMain builds sbx and starts a real sandboxd for the tests.
func TestMain(m *testing.M) {
	bin, why := testdaemon.Binary()
	if bin == "" {
		fmt.Println("SKIP:", why)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sbx-test-")
	if err != nil {
		panic(err)
	}
	sbxBin = filepath.Join(dir, "sbx")
	if out, err := exec.Command("go", "build", "-o", sbxBin, ".").CombinedOutput(); err != nil {
		fmt.Printf("building sbx: %v\n%s", err, out)
		os.Exit(1)
	}
	if d, err = testdaemon.Start(bin, dir); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	code := m.Run()
	if err := d.Stop(); err != nil {
		fmt.Println(err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// sbx runs the CLI against the test daemon (bounded), with stdin.
func sbx(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	full := append([]string{"--grpc-port", strconv.Itoa(d.GRPCPort), "--rest-port", strconv.Itoa(d.RESTPort)}, args...)
	cmd := exec.Command(sbxBin, full...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("sbx %v did not finish within 120s", args)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

func jsonOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

func TestExecPassesOutputAndExitStatus(t *testing.T) {
	r := sbx(t, "", "exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "exec", "-e", "A=b c", "-w", "/", "sh", "-c", "echo $A; pwd")
	if r.code != 0 || r.stdout != "b c\n"+d.Root+"\n" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "line one\nline two\n", "exec", "-i", "--", "sort", "-r")
	if r.code != 0 || r.stdout != "line two\nline one\n" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "exec", "--", "sh", "-c", "kill -KILL $$")
	if r.code != 255 {
		t.Fatalf("killed by a signal: %+v", r)
	}
	r = sbx(t, "", "exec", "--timeout", "300ms", "--", "sleep", "60")
	if r.code != 255 {
		t.Fatalf("timeout: %+v", r)
	}
}

func TestExecJSON(t *testing.T) {
	r := sbx(t, "", "--output", "json", "exec", "--", "sh", "-c", "printf 'a\\tb'; printf '\\377' >&2; exit 4")
	v := jsonOf(t, r.stdout)
	if r.code != 4 || v["exit_code"] != 4.0 || v["stdout"] != "a\tb" || v["stderr_base64"] != "/w==" || v["timed_out"] != false {
		t.Fatalf("%+v %v", r, v)
	}
	r = sbx(t, "", "exec", "--output", "json", "--max-output", "3", "--", "echo", "hello")
	if v := jsonOf(t, r.stdout); v["stdout"] != "hel" || v["stdout_truncated"] != true {
		t.Fatalf("%v", v)
	}
}

func TestErrors(t *testing.T) {
	r := sbx(t, "", "stat", "no/such")
	if r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "--output", "json", "exec", "--", "/no/such/binary")
	v := jsonOf(t, r.stdout)
	if e, _ := v["error"].(map[string]any); r.code != 1 || e["code"] != "NOT_FOUND" {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "frobnicate"); r.code != 2 || !strings.Contains(r.stderr, "unknown command") {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "cp", "a", "b"); r.code != 1 || !strings.Contains(r.stderr, "exactly one") {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "cp", ":../x", filepath.Join(t.TempDir(), "x")); r.code != 1 || !strings.Contains(r.stderr, "PERMISSION_DENIED") {
		t.Fatalf("%+v", r)
	}
}

func TestCpTreeBothWays(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	testdaemon.MakeTree(t, src)
	want := testdaemon.Tree(t, src)
	r := sbx(t, "", "cp", "--progress", "--output", "json", src, ":cli/tree")
	v := jsonOf(t, r.stdout)
	if r.code != 0 || v["kind"] != "directory" || v["entries"] != float64(len(want)) || v["direction"] != "upload" {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(r.stderr, "src ") || !strings.HasSuffix(r.stderr, "\x1b[K\n") {
		t.Fatalf("no progress bar: %q", r.stderr)
	}
	if got := testdaemon.Tree(t, filepath.Join(d.Root, "cli/tree")); !reflect.DeepEqual(got, want) {
		t.Fatalf("uploaded tree differs:\n%v\n%v", got, want)
	}
	back := filepath.Join(t.TempDir(), "back")
	r = sbx(t, "", "cp", ":cli/tree", back)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	if got := testdaemon.Tree(t, back); !reflect.DeepEqual(got, want) {
		t.Fatalf("downloaded tree differs:\n%v\n%v", got, want)
	}
}

func TestCpFileBothWays(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000)
	src := filepath.Join(dir, "f.bin")
	os.WriteFile(src, data, 0o640)
	if r := sbx(t, "", "mkdir", "-p", "cli/files"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	r := sbx(t, "", "cp", "--progress", "--output", "json", src, ":cli/files")
	v := jsonOf(t, r.stdout)
	if r.code != 0 || v["destination"] != ":cli/files/f.bin" || v["bytes"] != float64(len(data)) || !strings.Contains(r.stderr, "100%") {
		t.Fatalf("%+v", r)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if r := sbx(t, "", "cp", ":cli/files/f.bin", out); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	got, _ := os.ReadFile(filepath.Join(out, "f.bin"))
	st, _ := os.Stat(filepath.Join(out, "f.bin"))
	if !bytes.Equal(got, data) || st.Mode().Perm() != 0o640 {
		t.Fatalf("file differs (mode %v)", st.Mode())
	}
	if r := sbx(t, "from stdin", "cp", "-", ":cli/files/stdin.txt"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "cp", ":cli/files/stdin.txt", "-"); r.code != 0 || r.stdout != "from stdin" {
		t.Fatalf("%+v", r)
	}
}

func TestLsStatMkdirMvRm(t *testing.T) {
	for _, args := range [][]string{{"mkdir", "-p", "cli/ls/sub"}, {"cp", "-", ":cli/ls/a.txt"}} {
		if r := sbx(t, "hello", args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	r := sbx(t, "", "ls", "cli/ls", "--output", "json")
	v := jsonOf(t, r.stdout)
	ents, _ := v["entries"].([]any)
	if r.code != 0 || len(ents) != 2 {
		t.Fatalf("%+v", r)
	}
	a, s := ents[0].(map[string]any), ents[1].(map[string]any)
	if a["name"] != "a.txt" || a["size"] != 5.0 || a["type"] != "file" || s["name"] != "sub" || s["type"] != "directory" {
		t.Fatalf("%v", ents)
	}
	r = sbx(t, "", "ls", "cli/ls")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[1], " sub/") || !strings.HasPrefix(strings.TrimSpace(lines[1]), "drwx") {
		t.Fatalf("%q", r.stdout)
	}
	r = sbx(t, "", "--output", "json", "stat", "cli/ls/a.txt")
	v = jsonOf(t, r.stdout)
	st, _ := os.Stat(filepath.Join(d.Root, "cli/ls/a.txt"))
	if v["size"] != 5.0 || v["type"] != "file" || v["mode"] != fmt.Sprintf("%04o", st.Mode().Perm()) || v["path"] != "/cli/ls/a.txt" {
		t.Fatalf("%v", v)
	}
	if r := sbx(t, "", "mv", "cli/ls/a.txt", "cli/ls/sub/b.txt"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(filepath.Join(d.Root, "cli/ls/sub/b.txt")); err != nil {
		t.Fatal(err)
	}
	if r := sbx(t, "", "rm", "cli/ls"); r.code != 1 || !strings.Contains(r.stderr, "CONFLICT") {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "--output", "json", "rm", "-r", "cli/ls"); r.code != 0 || jsonOf(t, r.stdout)["ok"] != true {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(filepath.Join(d.Root, "cli/ls")); !os.IsNotExist(err) {
		t.Fatal("not removed")
	}
}

func TestProcessCommands(t *testing.T) {
	r := sbx(t, "", "run", "--tag", "cli-ps", "-i", "--", "sh", "-c", "echo one; read l; echo two $l; exit 5")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "--output", "json", "ps", "--tag", "cli-ps")
	procs, _ := jsonOf(t, r.stdout)["processes"].([]any)
	if len(procs) != 1 || fmt.Sprint(procs[0].(map[string]any)["id"]) != id || procs[0].(map[string]any)["state"] != "running" {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "ps"); r.code != 0 || !strings.Contains(r.stdout, "cli-ps") || !strings.HasPrefix(r.stdout, "ID") {
		t.Fatalf("%+v", r)
	}
	// logs without -f: what is held now, from an offset.
	deadline := time.Now().Add(10 * time.Second)
	for r = sbx(t, "", "logs", id); r.stdout != "one\n"; r = sbx(t, "", "logs", id) {
		if time.Now().After(deadline) {
			t.Fatalf("%+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := sbx(t, "", "logs", "--from", "2", id); r.stdout != "e\n" {
		t.Fatalf("%+v", r)
	}
	// attach follows to the exit, feeds stdin, and passes the status through.
	r = sbx(t, "x\n", "attach", "-i", id)
	if r.code != 5 || r.stdout != "one\ntwo x\n" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "--output", "json", "wait", id)
	if v := jsonOf(t, r.stdout); r.code != 5 || v["exit_code"] != 5.0 || v["reason"] != "exited" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "run", "--", "sh", "-c", "sleep 60 & sleep 60 & wait")
	id = strings.TrimSpace(r.stdout)
	if r := sbx(t, "", "kill", "--signal", "KILL", "--tree", id); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "wait", id); r.code != 128+9 {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "run", "--", "head", "-c", "3000000", "/dev/zero")
	id = strings.TrimSpace(r.stdout)
	sbx(t, "", "wait", id)
	r = sbx(t, "", "logs", id)
	if !strings.Contains(r.stderr, "bytes of stdout dropped") || len(r.stdout) == 0 || len(r.stdout) >= 3000000 {
		t.Fatalf("%d bytes, %q", len(r.stdout), r.stderr)
	}
	r = sbx(t, "", "--output", "json", "logs", id)
	if v := jsonOf(t, r.stdout); len(v["truncated"].([]any)) != 1 || v["exit"].(map[string]any)["reason"] != "exited" {
		t.Fatalf("%v", v["truncated"])
	}
	if r := sbx(t, "", "kill", "--signal", "BOGUS", id); r.code != 1 || !strings.Contains(r.stderr, "unknown signal") {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "wait", "999999"); r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("%+v", r)
	}
}

func TestToken(t *testing.T) {
	bin, _ := testdaemon.Binary()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "--token-file") {
		t.Skip("this sandboxd has no --token-file yet (bearer-token auth not built)")
	}
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	os.WriteFile(tf, []byte("cli-token\n"), 0o600)
	td, err := testdaemon.Start(bin, dir, "--token-file", tf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := td.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ports := []string{"--grpc-port", strconv.Itoa(td.GRPCPort), "--rest-port", strconv.Itoa(td.RESTPort)}
	run := func(env string, args ...string) result {
		cmd := exec.Command(sbxBin, append(ports, args...)...)
		cmd.Env = append(os.Environ(), env)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
	}
	if r := run("SANDBOXD_TOKEN=cli-token", "exec", "--", "echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("token from the environment: %+v", r)
	}
	if r := run("X=1", "--token", "cli-token", "ls"); r.code != 0 {
		t.Fatalf("--token: %+v", r)
	}
	for _, args := range [][]string{{"exec", "--", "true"}, {"ls"}, {"--token", "wrong", "stat", "/"}} {
		if r := run("SANDBOXD_TOKEN=", args...); r.code != 1 || !strings.Contains(r.stderr, "UNAUTHENTICATED") {
			t.Fatalf("%v: %+v", args, r)
		}
	}
}

func TestExecAndRunSeccomp(t *testing.T) {
	probe := "awk '/^Seccomp_filters:/ {print $2}' /proc/self/status"
	filters := func(r result) int {
		t.Helper()
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if err != nil || r.code != 0 {
			t.Fatalf("%+v", r)
		}
		return n
	}
	off := filters(sbx(t, "", "exec", "--seccomp", "off", "--", "sh", "-c", probe))
	if n := filters(sbx(t, "", "exec", "--seccomp", "default", "--", "sh", "-c", probe)); n != off+1 {
		t.Fatalf("default: %d filters, off: %d", n, off)
	}
	// Without the flag exec stays on process.v1, under the daemon's profile (default here).
	if n := filters(sbx(t, "", "exec", "--", "sh", "-c", probe)); n != off+1 {
		t.Fatalf("the daemon's: %d filters, off: %d", n, off)
	}
	// Exit status, stdin and stderr go through the sandboxd.v1 path as through exec's.
	r := sbx(t, "b\na\n", "exec", "-i", "--seccomp", "off", "--", "sh", "-c", "sort; echo e >&2; exit 5")
	if r.code != 5 || r.stdout != "a\nb\n" || r.stderr != "e\n" {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "--output", "json", "exec", "--seccomp", "off", "--", "sh", "-c", probe+"; exit 2")
	v := jsonOf(t, r.stdout)
	if ex, _ := v["exit"].(map[string]any); r.code != 2 || v["stdout"] != strconv.Itoa(off)+"\n" || ex["reason"] != "exited" {
		t.Fatalf("%+v %v", r, v)
	}
	r = sbx(t, "", "exec", "--seccomp", "strict", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "INVALID_ARGUMENT") {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "exec", "-t", "--seccomp", "off", "--", "true"); r.code != 2 {
		t.Fatalf("%+v", r)
	}
	r = sbx(t, "", "run", "--seccomp", "off", "--", "sh", "-c", probe)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if r := sbx(t, "", "wait", id); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if n := filters(sbx(t, "", "logs", id)); n != off {
		t.Fatalf("run --seccomp off: %d filters, off: %d", n, off)
	}
}

func TestWatch(t *testing.T) {
	dir := filepath.Join(d.Root, "watched")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	full := []string{"--grpc-port", strconv.Itoa(d.GRPCPort), "--rest-port", strconv.Itoa(d.RESTPort),
		"watch", "-r", "--count", "2", "--output", "json", "watched"}
	cmd := exec.Command(sbxBin, full...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	lines := bufio.NewScanner(stdout)
	var got []string
	for lines.Scan() {
		v := jsonOf(t, lines.Text())
		got = append(got, fmt.Sprintf("%v %v %v", v["seq"], v["kind"], v["path"]))
		if len(got) == 1 { // ready: every directory is watched, changes from now on are seen
			if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "a", "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v %q", err, got)
	}
	if want := []string{"0 ready <nil>", "1 create a", "2 create a/f"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("%q", got)
	}
}
