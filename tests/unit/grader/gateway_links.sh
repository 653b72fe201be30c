#!/bin/sh
# gateway_links.sh NM --gateway LIB... --runner LIB... --deps NAME...
#
# Proves the gateway links no grader runner and no sandbox: no symbol that the gateway's static
# libraries (--gateway: libwhet_gateway.a, libwhet_grader.a) reference may be one that the runner's
# libraries (--runner: libwhet_grader_runner.a, libwhet_sandbox.a) define, and the whet_* libraries
# CMake links whet_gateway with (--deps, its whole link interface) must not name them either.
set -eu
nm=$1
shift
gateway="" runner="" deps="" list=""
for arg in "$@"; do
    case $arg in
    --gateway | --runner | --deps) list=${arg#--} ;;
    *) eval "$list=\"\$$list $arg\"" ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086 # the lists are paths without spaces (build outputs)
"$nm" -g --undefined-only $gateway | awk '$1 == "U" { print $2 }' | sort -u >"$tmp/referenced"
# shellcheck disable=SC2086
"$nm" -g --defined-only $runner | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/runner"
fail=0
# The check could not fail if nm read nothing: the gateway references the grader library's validation,
# and the runner defines pygrader_run and the sandbox's entry point.
grep -qx grader_validate "$tmp/referenced" || { echo "nm found no reference to grader_validate in:$gateway"; fail=1; }
for want in pygrader_run grader_run_batch; do
    grep -qx "$want" "$tmp/runner" || { echo "nm found no definition of $want in:$runner"; fail=1; }
done
if comm -12 "$tmp/referenced" "$tmp/runner" >"$tmp/both" && [ -s "$tmp/both" ]; then
    echo "the gateway's libraries reference symbols of the grader runner or the sandbox:"
    sed 's/^/  /' "$tmp/both"
    fail=1
fi
for d in $deps; do
    case $d in
    whet_sandbox | whet_grader_runner) echo "whet_gateway links $d (its link interface: $deps)"; fail=1 ;;
    esac
done
[ $fail -eq 0 ] && echo "ok: the gateway links$deps, and none of the runner's or sandbox's symbols"
exit $fail
