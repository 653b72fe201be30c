#!/bin/sh
# cli_sandbox.sh - `whet sandbox run` passes the command's exit status through, prints one verdict
# line, maps the timeout to 124 and setup failures to 125, only the --writable dir is writable, and a
# server's network (--listen, --connect) lets exactly that through, and a GPU gang rank's (--peer,
# --unix-sockets, --shm) what NCCL needs.
set -u
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
dir=$(mktemp -d /tmp/whet-cli-sandbox-XXXXXX)
mkdir "$dir/job" "$dir/other"

"$WHET_BIN" sandbox --help >/dev/null; check "help exits 0" '[ $? -eq 0 ]'
"$WHET_BIN" sandbox run -- sh -c 'exit 7' 2>"$dir/err"; rc=$?
check "exit status passes through" '[ $rc -eq 7 ]'
check "verdict line names the reason" 'grep -q "whet sandbox: exit: exited with status 7" "$dir/err"'

out=$("$WHET_BIN" sandbox run --writable "$dir/job" -- sh -c "echo inside > $dir/job/f; echo x > $dir/other/f; ls $dir" 2>"$dir/err")
check "the writable dir is written" 'grep -q inside "$dir/job/f"'
check "the sibling dir is not written" '[ ! -e "$dir/other/f" ]'
check "only the job dir is visible" '[ "$out" = job ]'

"$WHET_BIN" sandbox run --wall 0.5 -- sleep 30 2>"$dir/err"; rc=$?
check "timeout exits 124" '[ $rc -eq 124 ]'
check "timeout is reported" 'grep -q "timeout: killed: wall-clock timeout of 0.5 s" "$dir/err"'

"$WHET_BIN" sandbox run -- /no/such/program 2>"$dir/err"; rc=$?
check "setup failure exits 125" '[ $rc -eq 125 ]'

/usr/bin/python3 -c 1 2>/dev/null && {
    "$WHET_BIN" sandbox run -- /usr/bin/python3 -c 'import socket; socket.create_connection(("10.0.0.1", 80))' 2>"$dir/err"
    check "python cannot open a socket" 'grep -q "PermissionError" "$dir/err"'
}
# a server's network (--listen, --connect): bind the address given and connect where allowed, nothing else
/usr/bin/python3 -c 1 2>/dev/null && {
    "$WHET_BIN" sandbox run --listen 127.0.0.1 -- /usr/bin/python3 -c \
        'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1])' \
        >"$dir/port" 2>"$dir/err"; rc=$?
    check "--listen: the address given is bound" '[ $rc -eq 0 ] && [ "$(cat "$dir/port")" -gt 0 ]'
    "$WHET_BIN" sandbox run --listen 127.0.0.1 -- /usr/bin/python3 -c \
        'import socket; socket.create_connection(("127.0.0.1", 9))' 2>"$dir/err"; rc=$?
    check "--listen: a connect elsewhere ends the sandbox" '[ $rc -ne 0 ] && grep -q "whet sandbox: seccomp" "$dir/err"'
    /usr/bin/python3 -c 'import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); sys.stdout.close()
s.settimeout(20); c, _ = s.accept(); c.close()' >"$dir/listener" &
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$dir/listener" ] && break; sleep 0.2; done
    port=$(cat "$dir/listener")
    "$WHET_BIN" sandbox run --listen 127.0.0.1 --connect "127.0.0.1:$port" -- /usr/bin/python3 -c \
        "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>"$dir/err"; rc=$?
    check "--connect: the endpoint given is reached" '[ $rc -eq 0 ]'
    wait
    "$WHET_BIN" sandbox run --connect 127.0.0.1:1 -- true 2>"$dir/err"; rc=$?
    check "--connect without --listen is a usage error" '[ $rc -eq 2 ] && grep -q "needs --listen" "$dir/err"'
}
# grade: a python grader over JSONL pairs, one answer line per pair, a hostile pair scoring 0
cat >"$dir/grader.py" <<'PY'
def grade(sample, item):
    if item.get("hostile"):
        import socket
        socket.socket()
    return 1.0 if sample["output_text"] == item["answer"] else 0.0
PY
printf '%s\n' '{"sample":{"output_text":"4"},"item":{"answer":"4"}}' \
    '{"sample":{"output_text":"5"},"item":{"answer":"4"}}' \
    '{"sample":{"output_text":"4"},"item":{"answer":"4","hostile":true}}' >"$dir/pairs.jsonl"
"$WHET_BIN" sandbox grade --source "$dir/grader.py" --timeout 2 <"$dir/pairs.jsonl" >"$dir/scores" 2>"$dir/err"; rc=$?
check "grade exits 0" '[ $rc -eq 0 ]'
check "grade answers in order" '[ "$(sed -n 1p "$dir/scores")" = "{\"score\":1.0}" ] && [ "$(sed -n 2p "$dir/scores")" = "{\"score\":0.0}" ]'
check "a grader opening a socket scores 0 with the error" 'sed -n 3p "$dir/scores" | grep -q "\"score\":0.0,\"error\":\"PermissionError"'

# nested: the grader pool runs inside a sandbox that allows it (how whet train would run graders);
# without --nested the inner sandbox cannot be built
bindir=$(dirname "$(readlink -f "$WHET_BIN")")
# (a sanitizer build's LeakSanitizer stops the world with ptrace at exit, which the filter kills)
"$WHET_BIN" sandbox run --nested --env ASAN_OPTIONS=detect_leaks=0 --readonly "$bindir" --readonly "$dir" \
    -- "$(readlink -f "$WHET_BIN")" sandbox grade \
    --source "$dir/grader.py" --timeout 2 <"$dir/pairs.jsonl" >"$dir/nested" 2>"$dir/err"; rc=$?
check "nested grading works" '[ $rc -eq 0 ] && cmp -s "$dir/scores" "$dir/nested"'
"$WHET_BIN" sandbox run --env ASAN_OPTIONS=detect_leaks=0 --readonly "$bindir" --readonly "$dir" \
    -- "$(readlink -f "$WHET_BIN")" sandbox grade \
    --source "$dir/grader.py" --timeout 2 <"$dir/pairs.jsonl" >"$dir/flat" 2>"$dir/err"
check "without --nested the inner sandbox is refused" 'grep -q "clone with new namespaces: Operation not permitted" "$dir/flat"'

"$WHET_BIN" sandbox probe >"$dir/probe"; rc=$?
check "probe says the sandbox works" '[ $rc -eq 0 ] && grep -q "sandbox: working" "$dir/probe"'
# a GPU gang rank's sandbox (--peer, --unix-sockets, --shm), as the executor builds it for NCCL: path-named
# unix sockets work and /dev/shm is the host dir given; without --unix-sockets a unix socket ends it
/usr/bin/python3 -c 1 2>/dev/null && {
    mkdir "$dir/shm"
    "$WHET_BIN" sandbox run --peer 127.0.0.1 --unix-sockets --shm "$dir/shm" -- /usr/bin/python3 -c '
import socket
a = socket.socket(socket.AF_UNIX); a.bind("/tmp/proxy-0"); a.listen(1)
b = socket.socket(socket.AF_UNIX); b.connect("/tmp/proxy-0")
c, _ = a.accept(); b.sendall(b"hi"); assert c.recv(2) == b"hi"
open("/dev/shm/nccl-seg", "w").write("seg")' 2>"$dir/err"; rc=$?
    if grep -q "Landlock ABI 6" "$dir/err"; then
        check "--unix-sockets: refused, saying why, where the kernel lacks Landlock ABI 6" '[ $rc -eq 125 ]'
    else
        check "--unix-sockets: a path-named socket binds, connects and carries data" '[ $rc -eq 0 ]'
        check "--shm: /dev/shm is the host dir given" 'grep -q seg "$dir/shm/nccl-seg"'
    fi
    "$WHET_BIN" sandbox run --peer 127.0.0.1 -- /usr/bin/python3 -c \
        'import socket; socket.socket(socket.AF_UNIX).bind("/tmp/x")' 2>"$dir/err"; rc=$?
    check "--peer without --unix-sockets: a unix socket ends the sandbox" '[ $rc -ne 0 ] && grep -q "whet sandbox: seccomp" "$dir/err"'
    "$WHET_BIN" sandbox run --unix-sockets -- true 2>"$dir/err"; rc=$?
    check "--unix-sockets alone is refused with a hint" '[ $rc -eq 2 ] && grep -q "needs --peer" "$dir/err"'
}
rm -rf "$dir"
exit $fail
