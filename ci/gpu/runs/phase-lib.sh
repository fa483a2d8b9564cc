# Sourced by the ci/gpu/runs/<date>.sh phase scripts (after they set O, START and LIMIT):
#   left            seconds left of the phase's LIMIT
#   run NAME [TIMEOUT] CMD...
#                   run CMD limited to TIMEOUT or to what is left of the phase (whichever is less;
#                   skipped under 30 s), output in $O/NAME.log, "NAME rc=... s" appended to $O/lanes.txt
left() { echo $((LIMIT - ($(date +%s) - START))); }
run() {
    local name=$1; shift
    local t; t=$(left)
    if [[ $1 =~ ^[0-9]+$ ]]; then [ "$1" -lt "$t" ] && t=$1; shift; fi
    if [ "$t" -lt 30 ]; then echo "SKIP $name (no time left)" | tee -a "$O/lanes.txt"; return; fi
    local t0; t0=$(date +%s)
    timeout -k 5 "$t" "$@" >"$O/$name.log" 2>&1
    echo "$name rc=$? $(($(date +%s) - t0)) s (limit $t s)" | tee -a "$O/lanes.txt"
}
