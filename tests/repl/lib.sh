# Helpers of the REPL's terminal suites (tests/repl/run.sh, tests/repl/fork.sh),
# sourced after the script defines T (its tmux command) and TAP_PREFIX (the
# words after "ok - " on each line). Every wait polls with a deadline.

now_ms() { date +%s%3N; }
screen() { T capture-pane -p -J -S -300 2>/dev/null; }

# wait_for PATTERN [SECONDS]: the screen (with scrollback) matches in time.
wait_for() {
	deadline=$(($(now_ms) + ${2:-5} * 1000))
	while :; do
		screen | grep -qE -- "$1" && return 0
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.05
	done
}

# wait_count PATTERN N [SECONDS]: at least N screen lines match in time.
wait_count() {
	deadline=$(($(now_ms) + ${3:-5} * 1000))
	while :; do
		[ "$(screen | grep -cE -- "$1")" -ge "$2" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.05
	done
}

# wait_after MARK PATTERN [SECONDS]: a line matching PATTERN comes after the
# last line matching MARK (the output of one input, not an earlier one's).
wait_after() {
	deadline=$(($(now_ms) + ${3:-5} * 1000))
	while :; do
		screen | awk -v m="$1" -v p="$2" '$0 ~ m { seen = 1; found = 0; next } seen && $0 ~ p { found = 1 } END { exit !found }' && return 0
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.05
	done
}

type_line() { T send-keys -l -- "$1" && T send-keys Enter; }

pass() { echo "ok - $TAP_PREFIX $1"; }
fail() {
	echo "not ok - $TAP_PREFIX $1"
	screen | sed 's/^/#   /'
}
check() { # name command...
	name=$1
	shift
	if "$@"; then pass "$name"; else fail "$name"; fi
}
