#!/bin/sh
# cli_sandbox.sh - `whet sandbox run` passes the command's exit status through, prints one verdict
# line, maps the timeout to 124 and setup failures to 125, and only the --writable dir is writable.
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
"$WHET_BIN" sandbox probe >"$dir/probe"; rc=$?
check "probe says the sandbox works" '[ $rc -eq 0 ] && grep -q "sandbox: working" "$dir/probe"'
rm -rf "$dir"
exit $fail
