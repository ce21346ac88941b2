#!/bin/sh
# tests/sandbox/run.sh — the threat model's cases (docs/threat-model.md) against `luarig sandbox run`.
#
# Every case runs the same probe twice: once directly on the host (the
# positive control: it must succeed, or the case proves nothing) and once
# confined (it must fail the way docs/threat-model.md says). Cases about user
# authority run again as an unprivileged user the suite creates when it runs
# as root. Cases 22-25 (grants, a corrupt spec, a missing guarantee) are unit
# tests of their parts: tests/unit/sandbox_grant_test.c,
# tests/unit/sandbox_helper_test.c, tests/unit/sandbox_probe_test.c.
#
# Prints "ok - sandbox N ..." / "not ok - sandbox N ..." lines.
LUARIG=${LUARIG:-$PWD/build/luarig}
case "$LUARIG" in /*) ;; *) LUARIG=$PWD/$LUARIG ;; esac
PY=/usr/bin/python3
T=$(mktemp -d /tmp/lr-sbx.XXXXXX)
chmod 755 "$T"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	pkill -f "lr-sbx-marker-$$" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT INT TERM

ok() { echo "ok - sandbox $*"; }
notok() { echo "not ok - sandbox $*"; }
# check N description control-status confined-status: both must be 0 (true)
check() {
	n=$1 what=$2 control=$3 confined=$4
	if [ "$control" != 0 ]; then
		notok "$n $what: the positive control failed unconfined (the case proves nothing)"
	elif [ "$confined" != 0 ]; then
		notok "$n $what: confined, the attack was not stopped"
	else
		ok "$n $what"
	fi
}

# A user's home with secrets, and a workspace.
setup_home() { # dir
	mkdir -p "$1/.ssh" "$1/.aws"
	echo "PRIVATE KEY" >"$1/.ssh/id_rsa"
	echo "[default] aws_secret_access_key=x" >"$1/.aws/credentials"
	echo "# bashrc" >"$1/.bashrc"
	echo "[user] name=x" >"$1/.gitconfig"
	echo "secret" >"$1/secret"
}

H=$T/home
WS=$T/ws
setup_home "$H"
mkdir -p "$WS"
export HOME="$H"

box() { # run confined in the trusted profile on $WS: box CMD ARGS...
	"$LUARIG" sandbox run --profile trusted --workspace "$WS" --timeout 60 -- "$@"
}
sh_box() { box /bin/sh -c "$1"; }

# ---- files (1-6) ----

# 1: secrets by absolute path
cat "$H/.ssh/id_rsa" "$H/.aws/credentials" >/dev/null 2>&1; c=$?
d=0
sh_box "cat '$H/.ssh/id_rsa'" >/dev/null 2>&1 && d=1
sh_box "cat '$H/.aws/credentials'" >/dev/null 2>&1 && d=1
check 1 "secrets by absolute path are not readable" $c $d

# 1 (root): the target keeps the real uid; as root it must still not read
# root-only files of the host roots it sees (/etc/shadow)
if [ "$(id -u)" = 0 ] && [ -f /etc/shadow ]; then
	head -c 1 /etc/shadow >/dev/null 2>&1; c=$?
	! sh_box "head -c 1 /etc/shadow | grep -q ." >/dev/null 2>&1; d=$?
	check 1 "as root, /etc/shadow of a read-only host root is not readable" $c $d
fi
# ... nor a file below a directory of /etc others cannot search (masked whole), at any depth
if [ "$(id -u)" = 0 ] && [ -d /etc ]; then
	PD=/etc/lr-sbx-private-$$
	mkdir -p "$PD/a/b/c/d/e/f/g/h/i" && chmod 700 "$PD" && echo secret >"$PD/a/key" &&
		echo deep >"$PD/a/b/c/d/e/f/g/h/i/key" && chmod 644 "$PD/a/key"
	DEEP=/etc/lr-sbx-deep-$$
	mkdir -p "$DEEP/a/b/c/d/e/f/g/h/i" && echo deep >"$DEEP/a/b/c/d/e/f/g/h/i/key" &&
		chmod 600 "$DEEP/a/b/c/d/e/f/g/h/i/key"
	cat "$PD/a/key" "$DEEP/a/b/c/d/e/f/g/h/i/key" >/dev/null 2>&1; c=$?
	d=0
	sh_box "cat '$PD/a/key'" >/dev/null 2>&1 && d=1
	sh_box "ls '$PD'" >/dev/null 2>&1 && d=1
	sh_box "cat '$DEEP/a/b/c/d/e/f/g/h/i/key'" >/dev/null 2>&1 && d=1
	sh_box "cat /etc/hostname /etc/passwd >/dev/null" >/dev/null 2>&1 || d=1
	rm -rf "$PD" "$DEEP"
	check 1 "as root, a directory of /etc others cannot search and a private file below the walk's depth are not readable; public files are" $c $d
fi

# 2: a symlink planted in the workspace pointing at a secret
ln -s "$H/.ssh/id_rsa" "$WS/planted"
cat "$WS/planted" >/dev/null 2>&1; c=$?
! sh_box "cat '$WS/planted'" >/dev/null 2>&1; d=$?
rm -f "$WS/planted"
check 2 "a planted symlink to a secret is not followed" $c $d

# 3: write outside through a workspace symlink
ln -s "$H/.bashrc" "$WS/x"
cp "$H/.bashrc" "$T/bashrc.orig"
(echo pwned >>"$WS/x") 2>/dev/null; c=$?
cp "$T/bashrc.orig" "$H/.bashrc"
sh_box "echo pwned >> '$WS/x'" >/dev/null 2>&1
cmp -s "$H/.bashrc" "$T/bashrc.orig"; d=$?
rm -f "$WS/x"
check 3 "a write through a workspace symlink does not land outside" $c $d

# 4: hardlink in, rename out, rename in; a rename inside the workspace works
mkdir -p "$WS/a" "$WS/b"
echo f >"$WS/f"
echo inner >"$WS/a/g"
(ln "$H/.ssh/id_rsa" "$T/hl" && rm "$T/hl") 2>/dev/null; c=$?
d=0
sh_box "ln '$H/.ssh/id_rsa' '$WS/hl'" >/dev/null 2>&1 && d=1
sh_box "mv '$WS/f' '$H/f'" >/dev/null 2>&1 && d=1
[ -e "$H/f" ] && d=1
sh_box "mv '$H/secret' '$WS/'" >/dev/null 2>&1 && d=1
[ -e "$H/secret" ] || d=1
sh_box "mv '$WS/a/g' '$WS/b/g'" >/dev/null 2>&1 || d=1
[ -e "$WS/b/g" ] || d=1
check 4 "no hardlink in, no rename out or in; a rename between workspace directories works" $c $d

# 5: protected git files in a writable workspace; git commit still works
G=$WS/repo
git init -q "$G" && git -C "$G" -c user.name=t -c user.email=t@e commit -q --allow-empty -m init
(echo x >>"$G/.git/config" && git -C "$G" config --unset-all core.x 2>/dev/null; true) 2>/dev/null; c=$?
cp "$G/.git/config" "$T/gitconfig.orig"
d=0
sh_box "echo '#!/bin/sh' > '$G/.git/hooks/pre-commit'" >/dev/null 2>&1 && d=1
[ -e "$G/.git/hooks/pre-commit" ] && d=1
sh_box "echo '[core] hooksPath=/tmp' >> '$G/.git/config'" >/dev/null 2>&1 && d=1
cmp -s "$G/.git/config" "$T/gitconfig.orig" || d=1
sh_box "cd '$G' && echo hi > f && git add f && git -c user.name=t -c user.email=t@e commit -q -m c" >/dev/null 2>&1 || d=1
# nor can a fresh .git be put in place by renaming the old one or the repository away
sh_box "mv '$G/.git' '$G/.git-old'" >/dev/null 2>&1 && d=1
sh_box "mv '$G' '$WS/repo-old'" >/dev/null 2>&1 && d=1
[ -d "$G/.git" ] || d=1
check 5 ".git/hooks and .git/config stay read-only, .git and its repository cannot be renamed away; git commit works" $c $d

# 6: the real home's dotfiles
cp "$H/.gitconfig" "$T/gc.orig"
(echo x >>"$H/.bashrc" && cp "$T/bashrc.orig" "$H/.bashrc") 2>/dev/null; c=$?
sh_box "echo x >> '$H/.bashrc'; echo x >> '$H/.gitconfig'" >/dev/null 2>&1
cmp -s "$H/.bashrc" "$T/bashrc.orig" && cmp -s "$H/.gitconfig" "$T/gc.orig"; d=$?
check 6 "~/.bashrc and ~/.gitconfig of the real home are not writable" $c $d

# ---- network (7-9, 27) ----

# A listener on every host address (TCP v4/v6, UDP), reached by the host's own address.
V4=$(ip -o -4 addr show scope global 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')
V6=$(ip -o -6 addr show scope global 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')
# without iproute2: the address a datagram socket would leave from (nothing is sent)
[ -n "$V4" ] || V4=$($PY -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('192.0.2.1', 9)); a=s.getsockname()[0]; print('' if a.startswith('127.') else a)" 2>/dev/null)
# wait_listen HOST PORT: polls until a TCP connect succeeds (20 s at most): a
# server started in the background is waited for, never slept for
wait_listen() {
	$PY -c "
import socket, sys, time
end = time.time() + 20
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        break
    except OSError:
        if time.time() > end: sys.exit(1)
        time.sleep(0.05)
" "$1" "$2"
}
PORT=$((20000 + $$ % 20000))
$PY - "$PORT" <<'EOF' >/dev/null 2>&1 &
import socket, sys, threading
port = int(sys.argv[1])
def tcp(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"hello\n"); c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
    while True:
        d, a = s.recvfrom(512); s.sendto(d, a)
threading.Thread(target=tcp, args=(socket.AF_INET, "0.0.0.0"), daemon=True).start()
threading.Thread(target=tcp, args=(socket.AF_INET6, "::"), daemon=True).start()
udp()
EOF
pids="$pids $!"
wait_listen 127.0.0.1 "$PORT"
probe_tcp() { # host port
	$PY -c "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); assert s.recv(6)==b'hello\n'" "$1" "$2"
}
probe_udp() {
	$PY -c "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b'q',(sys.argv[1], int(sys.argv[2]))); assert s.recvfrom(16)[0]==b'q'" "$1" "$2"
}
if [ -n "$V4" ]; then
	probe_tcp "$V4" $PORT 2>/dev/null && probe_udp "$V4" $PORT 2>/dev/null; c=$?
	d=0
	box $PY -c "import socket,sys; s=socket.create_connection(('$V4', $PORT), timeout=3)" >/dev/null 2>&1 && d=1
	box $PY -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b'q',('$V4', $PORT)); s.recvfrom(16)" >/dev/null 2>&1 && d=1
	box $PY -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b'q',('$V4', 53)); s.recvfrom(16)" >/dev/null 2>&1 && d=1
	check 7 "TCP and UDP (also to port 53) to a non-loopback IPv4 address are blocked" $c $d
else
	# no address but loopback: nothing to reach, so no positive control is possible
	ok "7 # SKIP this machine has no non-loopback IPv4 address"
fi
if [ -n "$V6" ]; then
	probe_tcp "$V6" $PORT 2>/dev/null; c=$?
	! box $PY -c "import socket; s=socket.create_connection(('$V6', $PORT), timeout=3)" >/dev/null 2>&1; d=$?
	check 7 "TCP to a non-loopback IPv6 address is blocked" $c $d
fi

# 8: raw and packet sockets
RAW="import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"
$PY -c "$RAW" 2>/dev/null; c=$?
! box $PY -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)" >/dev/null 2>&1 &&
	! box $PY -c "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)" >/dev/null 2>&1; d=$?
check 8 "raw and packet sockets are refused" $c $d

# 9: a host daemon's pathname UNIX socket under /tmp
SOCK=/tmp/lr-sbx-$$.sock
$PY -c "
import socket, os, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(4)
while True:
    c, _ = s.accept(); c.sendall(b'daemon'); c.close()
" "$SOCK" >/dev/null 2>&1 &
pids="$pids $!"
sleep 0.3
UNIXPROBE="import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect('$SOCK'); assert s.recv(6)==b'daemon'"
$PY -c "$UNIXPROBE" 2>/dev/null; c=$?
! box $PY -c "$UNIXPROBE" >/dev/null 2>&1; d=$?
check 9 "a host daemon's UNIX socket under /tmp is not reachable" $c $d
rm -f "$SOCK"

# 27: a server on 127.0.0.1 inside works from inside, not from the host
IP=$((PORT + 1))
SRV="import http.server, threading, urllib.request, time
srv = http.server.HTTPServer(('127.0.0.1', $IP), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
open('$WS/inside-up', 'w').close()
assert urllib.request.urlopen('http://127.0.0.1:$IP/', timeout=5).status == 200
time.sleep(3)"
rm -f "$WS/inside-up"
(cd "$WS" && $PY -c "$SRV" >/dev/null 2>&1); c=$?
rm -f "$WS/inside-up"
(cd "$WS" && box $PY -c "$SRV" >/dev/null 2>&1) &
bp=$!
i=0
while [ ! -e "$WS/inside-up" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
host_reach=1
$PY -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$IP/', timeout=2)" >/dev/null 2>&1 && host_reach=0
wait $bp; inside=$?
d=0
[ -e "$WS/inside-up" ] || d=1
[ $inside -eq 0 ] || d=1
[ $host_reach -eq 1 ] || d=1
rm -f "$WS/inside-up"
check 27 "a server on 127.0.0.1 inside is reachable inside and not from the host" $c $d

# ---- processes (10-13, 17, 18) ----

sleep 300 &
HOSTPID=$!
pids="$pids $HOSTPID"
kill -0 $HOSTPID 2>/dev/null && cat /proc/$HOSTPID/cmdline >/dev/null 2>&1; c=$?
d=0
sh_box "kill -0 $HOSTPID" >/dev/null 2>&1 && d=1
sh_box "kill -TERM $HOSTPID" >/dev/null 2>&1 && d=1
kill -0 $HOSTPID 2>/dev/null || d=1
check 10 "a host process cannot be signalled" $c $d
kill -0 $HOSTPID 2>/dev/null || { sleep 300 & HOSTPID=$!; pids="$pids $HOSTPID"; }
cat /proc/$HOSTPID/environ /proc/$HOSTPID/cmdline >/dev/null 2>&1; c=$?
! sh_box "cat /proc/$HOSTPID/environ || cat /proc/$HOSTPID/cmdline" >/dev/null 2>&1; d=$?
check 11 "/proc of a host process is not visible" $c $d

# 12: nested user namespace, then mount or chroot
unshare -Ur true 2>/dev/null; c=$?
! sh_box "unshare -Ur sh -c 'mount -t tmpfs none /tmp || chroot / true'" >/dev/null 2>&1; d=$?
check 12 "no nested namespaces, mounts or chroot" $c $d

# 13: no capabilities, even when luarig runs as root; setuid gains nothing
CAPS=$(awk '/^CapEff/ {print $2}' /proc/self/status)
[ "$(id -u)" = 0 ] && [ "$CAPS" != 0000000000000000 ]; c=$?
inside=$(sh_box "awk '/^CapEff/ {print \$2}' /proc/self/status; awk '/^CapPrm/ {print \$2}' /proc/self/status" 2>/dev/null | tr '\n' ' ')
d=1
[ "$inside" = "0000000000000000 0000000000000000 " ] && d=0
# a setuid copy of id in the workspace: nosuid / no_new_privs keep the euid
cp /usr/bin/id "$WS/suid-id" && chmod 4755 "$WS/suid-id"
euid=$(box "$WS/suid-id" -u 2>/dev/null)
[ "$euid" = 0 ] && [ "$(id -u)" != 0 ] && d=1
rm -f "$WS/suid-id"
check 13 "CapEff and CapPrm are 0 inside (host CapEff $CAPS); setuid gains nothing" $c $d

# 17: setsid + double fork + ignoring TERM/HUP leaves no survivor
# (marker binaries: copies of sleep in the workspace, findable with pgrep -f)
M=lr-sbx-marker-$$
for n in 15 15c 17 18; do cp /bin/sleep "$WS/$M-$n"; done
DAEMON="setsid sh -c 'trap \"\" TERM HUP; \"$WS/$M-17\" 300 & ' & sleep 0.5; exit 0"
sh -c "$DAEMON" >/dev/null 2>&1
sleep 0.6
pgrep -f "$M-17" >/dev/null; c=$?
pkill -KILL -f "$M-17" # it ignores TERM
sleep 0.2
sh_box "$DAEMON" >/dev/null 2>&1
sleep 0.3
! pgrep -f "$M-17" >/dev/null; d=$?
pkill -KILL -f "$M-17"
check 17 "a daemonized, signal-ignoring descendant does not outlive the run" $c $d

# 18: a background child holding stdout does not hang the run
# the control: unconfined, a reader of the output waits for the background child
sh -c "'$WS/$M-18' 300 & echo done" | timeout 3 cat >/dev/null
[ $? -eq 124 ]; c=$?
pkill -f "$M-18"
t0=$(date +%s)
out=$(sh_box "'$WS/$M-18' 300 & echo done" 2>/dev/null)
el=$(($(date +%s) - t0))
d=1
[ "$out" = done ] && [ $el -lt 15 ] && d=0
pkill -f "$M-18"
check 18 "a background child keeping stdout open does not hang the run (${el}s)" $c $d

# ---- lifetime (28): no confined process outlives luarig (issue 16 §3) ----
# luarig is killed with SIGKILL at chosen moments: while the command and its
# descendants (a setsid daemon too) run, during set-up (the helper entering
# unshare, the reaper entering pivot_root: tests/sandbox/stopat.c stops the
# run there under ptrace, kills luarig and lets the run go on), during the
# exit chain, and in a script (executor:run, executor:spawn, os.exit); and
# the helper is killed in the race between the reaper's fork and its prctl. A
# run is started in a directory of its own, its workspace: the helper works
# there (luarig's directory), the reaper and the command too, so every
# process of the run is found by its working directory whatever its name or
# pid namespace. A case waits until none is left (at most 20 s) and counts.
cc -O1 -o "$T/stopat" "$(dirname "$0")/stopat.c" || notok "28 cannot compile stopat.c"
wait_for() { # CMD: polls every 0.05 s, at most 20 s, until CMD succeeds
	i=0
	while ! eval "$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -ge 400 ] && return 1
		sleep 0.05
	done
}
in_dir() { # DIR: how many processes work in DIR or below
	find /proc/[0-9]*/cwd -maxdepth 0 \( -lname "$1" -o -lname "$1/*" \) 2>/dev/null | wc -l
}
left_in() { # DIR: waits until no process works in DIR, prints how many still do
	wait_for "[ \$(in_dir '$1') -eq 0 ]"
	in_dir "$1"
}
kill_in() { # DIR: kills what is left there (by pid)
	for p in $(find /proc/[0-9]*/cwd -maxdepth 0 \( -lname "$1" -o -lname "$1/*" \) 2>/dev/null |
		cut -d/ -f3); do kill -9 "$p" 2>/dev/null; done
}
lt_dir() { # NAME [OWNER]: a fresh directory $T/lt-NAME holding the marker copies of sleep
	mkdir -p "$T/lt-$1"
	for n in a b d; do cp /bin/sleep "$T/lt-$1/$M-lt$1$n"; done
	[ -n "$2" ] && chown -R "$2" "$T/lt-$1"
	echo "$T/lt-$1"
}
lt_cmd() { # DIR NAME: a daemon (setsid), a background child, and the command itself
	echo "setsid '$1/$M-lt$2d' 300 & '$1/$M-lt$2a' 300 & exec '$1/$M-lt$2b' 300"
}
lt_up() { # DIR NAME: waits until the three run (anchored: luarig's own argv names them too)
	wait_for "pgrep -f '^$1/$M-lt$2d ' && pgrep -f '^$1/$M-lt$2a ' && pgrep -f '^$1/$M-lt$2b '"
}
# the control: unconfined, killing the parent leaves its children running
D=$(lt_dir ctl)
(cd "$D" && exec sh -c "$(lt_cmd "$D" ctl)") >/dev/null 2>&1 &
lp=$!
lt_up "$D" ctl
kill -9 $lp
wait $lp 2>/dev/null
wait_for "[ \$(in_dir '$D') -eq 2 ]"
[ "$(in_dir "$D")" -eq 2 ]; c28=$?
kill_in "$D"
# lt_cli NAME [RUNAS...]: luarig sandbox run in a fresh directory, killed once the command runs
lt_cli() {
	n=$1
	shift
	D=$(lt_dir "$n" "${LT_OWNER:-}")
	(cd "$D" && exec "$@" "$LUARIG" sandbox run --profile trusted --workspace "$D" -- /bin/sh -c \
		"$(lt_cmd "$D" "$n")") >/dev/null 2>&1 &
	lp=$!
	lt_up "$D" "$n"; up=$?
	kill -9 $lp
	wait $lp 2>/dev/null
	left=$(left_in "$D")
	kill_in "$D"
	[ $up = 0 ] && [ "$left" = 0 ]
}
lt_cli cli; d=$?
check 28 "luarig sandbox run killed (SIGKILL) while the command, a child and a daemon run: $left left" $c28 $d
# lt_stop SYSCALL NAME ARGS...: ARGS (a luarig) started under stopat in $T/lt-NAME,
# killed when its helper or reaper enters SYSCALL
lt_stop() {
	sc=$1 n=$2
	shift 2
	D=$(lt_dir "$n" "${LT_OWNER:-}")
	# into a file: a survivor holding a pipe would keep a $(...) waiting
	(cd "$D" && exec "$@") >"$D.out" 2>/dev/null </dev/null
	[ $? = 3 ] && return 3 # no ptrace here
	left=$(left_in "$D")
	kill_in "$D"
	case "$(cat "$D.out")" in stopped*) [ "$left" = 0 ] ;; *) return 1 ;; esac
}
lt_check() { # DESCRIPTION D: check 28, or a skip when stopat could not trace (d = 3)
	if [ "$2" = 3 ]; then
		ok "28 $1 # SKIP this machine does not allow ptrace (tests/sandbox/stopat.c)"
	else
		check 28 "$1: $left left" $c28 "$2"
	fi
}
for sc in unshare pivot_root; do
	lt_stop $sc "su$sc" "$T/stopat" $sc __sandbox-helper "$LUARIG" sandbox run --profile trusted \
		--workspace "$T/lt-su$sc" -- /bin/sh -c "$(lt_cmd "$T/lt-su$sc" "su$sc")"; d=$?
	what="the reaper entering pivot_root"
	[ $sc = unshare ] && what="the helper entering unshare"
	lt_check "luarig sandbox run killed (SIGKILL) during set-up ($what)" $d
done
# the fork race: the helper killed between the reaper's fork and its first
# system call (the prctl that sets its parent-death signal); luarig lives on
# (a script holding its set), so only the reaper's own check can end it
cat >"$T/lt-race.lua" <<'EOF'
-- lt-race.lua DIR CMD: one run of CMD, then the set is held until DIR/go exists
local dir, cmd = arg[1], arg[2]
local p = rig.sandbox.profile{ workspace_root = dir, workspace_write = "allow",
                               network = "deny", command = "allow" }
local ex = assert(assert(rig.sandbox.executors(p)):get("k"))
ex:run{ command = cmd }
while not io.open(dir .. "/go") do rig.sleep(0.02) end
EOF
D=$(lt_dir race)
(cd "$D" && exec "$T/stopat" --parent prctl __sandbox-helper "$LUARIG" "$T/lt-race.lua" "$D" \
	"exec '$D/$M-ltraceb' 300") >"$D.out" 2>/dev/null </dev/null &
wait $!
d=$?
r=$(cut -d' ' -f2 "$D.out")
# the reaper either ends or starts the command
[ $d = 3 ] || wait_for "! kill -0 '$r' || pgrep -f '^$D/$M-ltraceb '"
touch "$D/go"
left=$(left_in "$D")
kill_in "$D"
if [ $d != 3 ]; then
	d=1
	case "$(cat "$D.out")" in stopped*) [ "$left" = 0 ] && d=0 ;; esac
fi
lt_check "the helper killed (SIGKILL) between the reaper's fork and its parent-death signal" $d
# the exit chain: the command exited, its reaper about to kill what is left
lt_stop kill exit "$T/stopat" kill __sandbox-helper "$LUARIG" sandbox run --profile trusted \
	--workspace "$T/lt-exit" -- /bin/sh -c \
	"setsid '$T/lt-exit/$M-ltexitd' 300 & '$T/lt-exit/$M-ltexita' 300 & exit 0"; d=$?
lt_check "luarig sandbox run killed (SIGKILL) during the exit chain (the reaper entering kill)" $d
# in a script: executor:run, executor:spawn, and os.exit with a spawned command running
cat >"$T/lt.lua" <<'EOF'
-- lt.lua MODE DIR CMD: one executor on DIR runs CMD (MODE run | warm | spawn | exit)
local mode, dir, cmd = arg[1], arg[2], arg[3]
local p = rig.sandbox.profile{ workspace_root = dir, workspace_write = "allow",
                               network = "deny", command = "allow" }
local ex = assert(assert(rig.sandbox.executors(p)):get("k"))
if mode == "run" then
  ex:run{ command = cmd }
elseif mode == "warm" then -- the second run of a set: forked by its pre-forked helper
  if assert(ex:run{ command = "true" }).code ~= 0 then os.exit(3) end
  ex:run{ command = cmd }
else
  local h = assert(ex:spawn{ command = cmd, stdout = "null", stderr = "null" })
  if mode == "exit" then -- once the test has seen the command run
    while not io.open(dir .. "/go") do rig.sleep(0.02) end
    os.exit(0)
  end
  h:wait()
end
EOF
for mode in run warm spawn exit; do
	D=$(lt_dir "lua$mode")
	(cd "$D" && exec "$LUARIG" "$T/lt.lua" $mode "$D" "$(lt_cmd "$D" "lua$mode")") >/dev/null 2>&1 &
	lp=$!
	lt_up "$D" "lua$mode"; up=$?
	if [ $mode = exit ]; then touch "$D/go"; else kill -9 $lp; fi
	wait $lp 2>/dev/null
	left=$(left_in "$D")
	kill_in "$D"
	[ $up = 0 ] && [ "$left" = 0 ]; d=$?
	case $mode in
	run) what="luarig killed (SIGKILL) while a script's executor:run runs" ;;
	warm) what="luarig killed (SIGKILL) while a script's second executor:run runs (through the pre-forked helper)" ;;
	spawn) what="luarig killed (SIGKILL) while a script's executor:spawn runs" ;;
	exit) what="a script ending with os.exit while its executor:spawn runs" ;;
	esac
	check 28 "$what: $left left" $c28 $d
done
lt_stop unshare luasetup "$T/stopat" unshare __sandbox-helper "$LUARIG" "$T/lt.lua" run \
	"$T/lt-luasetup" "$(lt_cmd "$T/lt-luasetup" luasetup)"; d=$?
lt_check "luarig killed (SIGKILL) during the set-up of a script's executor:run (the helper entering unshare)" $d

# ---- kernel surfaces (14) ----
cat >"$T/surfaces.c" <<'EOF'
#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
/* exit 0 when every call reached its kernel code (an error other than EPERM/ENOSYS).
 * Module loading is filtered too, but a kernel built without modules (this
 * one) answers ENOSYS unconfined, so it has no positive control here. */
int main(void)
{
	int bad = 0;
	union bpf_attr a;
	memset(&a, 0, sizeof a);
	a.map_type = BPF_MAP_TYPE_ARRAY; a.key_size = 4; a.value_size = 4; a.max_entries = 1;
	long r = syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a);
	if (r < 0 && (errno == EPERM || errno == ENOSYS)) { fprintf(stderr, "bpf: %s\n", strerror(errno)); bad++; }
	struct perf_event_attr p;
	memset(&p, 0, sizeof p);
	p.type = PERF_TYPE_SOFTWARE; p.size = sizeof p; p.config = PERF_COUNT_SW_TASK_CLOCK;
	r = syscall(SYS_perf_event_open, &p, 0, -1, -1, 0);
	if (r < 0 && (errno == EPERM || errno == EACCES || errno == ENOSYS)) { fprintf(stderr, "perf: %s\n", strerror(errno)); bad++; }
	r = syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0);
	if (r < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES)) { fprintf(stderr, "keyctl: %s\n", strerror(errno)); bad++; }
	return bad == 0 ? 0 : 10 + bad;
}
EOF
if gcc -o "$WS/surfaces" "$T/surfaces.c" 2>/dev/null; then
	"$WS/surfaces" 2>/dev/null; c=$?
	box "$WS/surfaces" >/dev/null 2>&1; r=$?
	d=1
	[ $r -eq 13 ] && d=0 # all three refused
	check 14 "bpf, perf_event_open and keyctl are refused (confined status $r)" $c $d
else
	notok "14 cannot compile the probe"
fi

# ---- kernel surface: socket families and protocols (29, issue 16 §5) ----
# tests/sandbox/sockets.c tries each socket(2) and socketpair(2) unconfined
# (the positive control: what this kernel has) and confined. Allowed: UNIX,
# and TCP and UDP over IPv4 and IPv6 (the sandbox's own loopback network).
# Refused: other IP types and protocols with EPROTONOSUPPORT, other
# families (and socketpair beyond UNIX) with EAFNOSUPPORT. A refused case
# whose control already fails with that same errno is not in this kernel:
# skipped, since the filter cannot be told apart from the kernel there.
sock_expect() { # CASE: ok | EPROTONOSUPPORT | EAFNOSUPPORT
	case $1 in
	unix-* | tcp4 | tcp4-ipproto | tcp4-flags | udp4 | udp4-ipproto | tcp6 | udp6) echo ok ;;
	mptcp* | sctp* | udplite* | icmp* | raw* | tcp4-highbits) echo EPROTONOSUPPORT ;;
	*) echo EAFNOSUPPORT ;;
	esac
}
sock_check() { # LABEL CONTROL-FILE CONFINED-FILE
	while read -r name ctl; do
		got=$(awk -v n="$name" '$1 == n {print $2}' "$3")
		want=$(sock_expect "$name")
		if [ "$want" = ok ]; then
			[ "$ctl" = ok ]; c=$?
			[ "$got" = ok ]; d=$?
			check 29 "$1socket $name works inside (got ${got:-nothing})" $c $d
		elif [ "$ctl" = "$want" ]; then
			ok "29 $1socket $name is refused with $want # SKIP not in this kernel (unconfined: $ctl)"
		else
			[ "$got" = "$want" ]; d=$?
			check 29 "$1socket $name is refused with $want (got ${got:-nothing}; unconfined: $ctl)" 0 $d
		fi
	done <"$2"
}
if cc -O1 -o "$WS/sockets" "$(dirname "$0")/sockets.c"; then
	"$WS/sockets" >"$T/sock.ctl"
	box "$WS/sockets" >"$T/sock.box" 2>/dev/null
	sock_check "" "$T/sock.ctl" "$T/sock.box"
	# the x32 system call ABI (a 64-bit process may use it where the kernel has it)
	ctl=$("$WS/sockets" x32 | cut -d' ' -f2)
	if [ "$ctl" = ok ]; then
		got=$(box "$WS/sockets" x32 2>/dev/null | cut -d' ' -f2)
		[ "$got" != ok ]; d=$?
		check 29 "an AF_NETLINK socket through the x32 ABI is refused (got ${got:-killed})" 0 $d
	else
		ok "29 an AF_NETLINK socket through the x32 ABI is refused # SKIP this kernel has no x32 ABI ($ctl)"
	fi
else
	notok "29 cannot compile sockets.c"
fi

# ---- resources (15, 16) ----

# 15: a process flood is capped; the host keeps working
FLOOD="i=0; while [ \$i -lt 2000 ]; do '$WS/$M-15' 30 & i=\$((i+1)); done; wait"
# the control: 600 processes at once are fine unconfined (the limit inside is lower)
sh -c "i=0; while [ \$i -lt 600 ]; do '$WS/$M-15c' 2 || exit 1 & i=\$((i+1)); done; wait" 2>/dev/null; c=$?
t0=$(date +%s)
sh_box "$FLOOD" >/dev/null 2>&1; r=$?
alive=$(pgrep -f "$M-15" | wc -l)
d=1
[ $r -ne 0 ] && [ "$alive" -eq 0 ] && d=0
check 15 "a process flood fails inside (status $r) and leaves nothing behind" $c $d

# 16: a file over the size limit (a sparse write past 1 GiB)
dd if=/dev/zero of="$T/big" bs=1 count=1 seek=2G 2>/dev/null; c=$?
rm -f "$T/big"
! sh_box "dd if=/dev/zero of='$WS/big' bs=1 count=1 seek=2G" >/dev/null 2>&1; d=$?
rm -f "$WS/big"
check 16 "a file beyond the size limit fails the command" $c $d

# 16 (tmpfs, issue 16 §4): /tmp, /dev/shm and /run inside are memory-backed
# and sized from the limits: filling one with data (each file below the
# file-size limit) or with files ends in ENOSPC; the guarantee report says
# so. The control: the host's /dev/shm takes the same.
FILL="import errno, os, sys
d, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = 0
try:
    if what == 'bytes':
        with open(os.path.join(d, 'lr-fill'), 'wb', buffering=0) as f:
            while done < n:
                f.write(b'\\0' * (1 << 20)); done += 1
    else:
        os.mkdir(os.path.join(d, 'lr-files'))
        while done < n:
            open(os.path.join(d, 'lr-files', str(done)), 'w').close(); done += 1
    print('wrote', done); sys.exit(1)
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno), done); sys.exit(0 if e.errno == errno.ENOSPC else 2)
finally:
    os.system('rm -rf ' + os.path.join(d, 'lr-fill') + ' ' + os.path.join(d, 'lr-files'))"
# the control fills a folder of its own in the host's /dev/shm: a second suite
# running beside this one (make test twice at once) must not share its files
SHM=$(mktemp -d /dev/shm/lr-sbx-fill.XXXXXX)
for t in "/tmp bytes 700" "/dev/shm bytes 700" "/run bytes 100" "/tmp files 70000" "/dev/shm files 70000"; do
	set -- $t
	out=$($PY -c "$FILL" "$SHM" "$2" "$3" 2>&1)
	[ "$out" = "wrote $3" ]; c=$?
	out=$(box $PY -c "$FILL" "$1" "$2" "$3" 2>&1)
	d=1
	case "$out" in "ENOSPC "*) d=0 ;; esac
	[ "$2" = bytes ] && what="$3 MiB" || what="$3 files"
	check 16 "writing $what into $1 inside ends in ENOSPC ($out)" $c $d
done
rm -rf "$SHM"
"$LUARIG" sandbox check 2>/dev/null | grep -q "^resource_limits .*/tmp and /dev/shm tmpfs of [0-9]* MiB and [0-9]* files each"; d=$?
check 16 "the guarantee report states the size of /tmp and /dev/shm" 0 $d

# ---- environment (19) ----
env_probe='env | grep -E "^(FOO_TOKEN|OPENAI_API_KEY|AWS_SECRET_ACCESS_KEY|SSH_AUTH_SOCK|GITHUB_TOKEN)="'
FOO_TOKEN=t OPENAI_API_KEY=k AWS_SECRET_ACCESS_KEY=a SSH_AUTH_SOCK=/tmp/agent GITHUB_TOKEN=g \
	sh -c "$env_probe" >/dev/null; c=$?
! FOO_TOKEN=t OPENAI_API_KEY=k AWS_SECRET_ACCESS_KEY=a SSH_AUTH_SOCK=/tmp/agent GITHUB_TOKEN=g \
	sh_box "$env_probe" >/dev/null 2>&1; d=$?
check 19 "secrets in the host environment are absent inside" $c $d
# 19: nor in the helper and the reaper, forked by `luarig sandbox run` or
# exec'd by a script's executor: each must look like the exec'd helper, with
# no environment, no fd the host had (here a non-close-on-exec fd 7 luarig
# inherited), and the helper's command line
echo marker >"$T/helper-fd"
cat >"$T/helper.lua" <<'EOF'
local p = rig.sandbox.profile{ workspace_root = arg[1], workspace_write = "allow",
                               network = "deny", command = "allow" }
assert(assert(rig.sandbox.executors(p)):get("k")):run{ command = "sleep 30" }
EOF
holds() { # PID: 0 when its environment or its fds hold the marks
	tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -q "^FOO_TOKEN=lr-sbx-helper-$$" ||
		ls -l "/proc/$1/fd/" 2>/dev/null | grep -q "$T/helper-fd"
}
for how in cli script; do
	if [ $how = cli ]; then
		set -- sandbox run --profile trusted --workspace "$WS" --timeout 60 -- /bin/sleep 30
	else
		set -- "$T/helper.lua" "$WS"
	fi
	(FOO_TOKEN=lr-sbx-helper-$$ exec "$LUARIG" "$@" 7<"$T/helper-fd" >/dev/null 2>&1) &
	hl=$!
	pids="$pids $hl"
	hp= rp=
	wait_for "hp=\$(pgrep -P $hl -f __sandbox-helper) && rp=\$(pgrep -P \$hp)" || hp= rp=
	holds $hl; c=$?
	d=1
	if [ -n "$hp" ] && [ -n "$rp" ] && ! holds "$hp" && ! holds "$rp"; then
		tr '\0' ' ' <"/proc/$hp/cmdline" | grep -Eq "^luarig __sandbox-helper( --end-fd=[56])? *$" && d=0
	fi
	kill "$hl" 2>/dev/null
	wait "$hl" 2>/dev/null
	check 19 "the helper and its reaper ($how) hold neither the host environment nor an fd luarig inherited" $c $d
done

# ---- proxy (20, 21) ----
UP=$((PORT + 2))
(cd "$T" && $PY -m http.server "$UP" --bind 127.0.0.1 >/dev/null 2>&1) &
pids="$pids $!"
wait_listen 127.0.0.1 "$UP"
curl -s -o /dev/null "http://127.0.0.1:$UP/"; c=$?
code=$("$LUARIG" sandbox run --profile trusted --workspace "$WS" --allow-net allowed.invalid:443 -- \
	/usr/bin/curl -s -o /dev/null -w '%{http_connect}' "https://not-allowed.invalid/" 2>/dev/null)
d=1
case "$code" in *403*) d=0 ;; esac
# and the allowed target, named by its address, is reached through the proxy
ok_code=$("$LUARIG" sandbox run --profile trusted --workspace "$WS" --allow-net "127.0.0.1:$UP" -- \
	/usr/bin/curl -s --noproxy '' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$UP/" 2>/dev/null)
[ "$ok_code" = 200 ] || d=1
check 20 "CONNECT to a host not on the allow-list is refused with 403 (got '$code'); an allowed one works ($ok_code)" $c $d
# the proxy variables are honoured for every name (--noproxy ''): the proxy resolves it itself
code=$("$LUARIG" sandbox run --profile trusted --workspace "$WS" --allow-net "localhost:$UP" -- \
	/usr/bin/curl -s --noproxy '' -o /dev/null -w '%{http_code}' "http://localhost:$UP/" 2>/dev/null)
d=1
[ "$code" = 403 ] && d=0
check 21 "an allowed name resolving to loopback is refused by the proxy (got '$code')" $c $d

# 8 (npm): npm install through the egress proxy from an allow-listed local registry.
# The registry listens on 127.0.0.2: the child's NO_PROXY names localhost and
# 127.0.0.1, and a name is never allowed to a private address (rebinding).
if command -v npm >/dev/null && command -v node >/dev/null; then
	NP=$((PORT + 3))
	$PY "$(dirname "$0")/npm_registry.py" 127.0.0.2 "$NP" 2>"$T/npm-registry.log" &
	pids="$pids $!"
	wait_listen 127.0.0.2 "$NP"
	NPMF="--registry http://127.0.0.2:$NP/ --no-audit --no-fund --no-update-notifier --fetch-retries=0 --fetch-timeout=20000 --loglevel=error"
	npm_ws() { # a fresh workspace depending on lr-sbx-demo
		rm -rf "$1"
		mkdir -p "$1"
		echo '{"name":"t","version":"1.0.0","private":true,"dependencies":{"lr-sbx-demo":"1.0.0"}}' >"$1/package.json"
	}
	NW=$T/npmc
	npm_ws "$NW"
	(cd "$NW" && HOME="$T/npmhome" npm install $NPMF >/dev/null 2>&1 &&
		node -e 'require("lr-sbx-demo")' >/dev/null 2>&1); c=$?
	NW=$WS/npm
	npm_run() { # allow-net args...: npm install confined in $NW, then require the package
		npm_ws "$NW"
		"$LUARIG" sandbox run --profile trusted --workspace "$WS" "$@" --timeout 120 -- /bin/sh -c \
			"cd '$NW' && npm install $NPMF && node -e 'require(\"lr-sbx-demo\")'" >"$T/npm.out" 2>&1
	}
	npm_run --allow-net "127.0.0.2:$NP"; r_ok=$?
	npm_run --allow-net "127.0.0.2:$((NP + 1))"; r_other=$?
	npm_run; r_none=$?
	d=0
	[ "$r_ok" = 0 ] || d=1
	[ "$r_other" != 0 ] && [ "$r_none" != 0 ] || d=1
	check 8 "npm install through the proxy from an allow-listed local registry works (status $r_ok); another allow-list ($r_other) or none ($r_none) fails" $c $d
else
	ok "8 npm through the proxy # skip: npm or node not installed (tools/deps.sh installs them)"
fi

# 2 (DNS): inside, names resolve only through the proxy's stub, and only allow-listed ones
DNSP="import socket,sys
assert socket.gethostbyname('allowed.invalid') == '127.0.0.1'
try:
    socket.gethostbyname('other.invalid'); sys.exit(1)
except socket.gaierror:
    pass"
$PY -c "import socket; socket.gethostbyname('localhost')" 2>/dev/null; c=$?
"$LUARIG" sandbox run --profile trusted --workspace "$WS" --allow-net allowed.invalid:443 -- \
	$PY -c "$DNSP" >/dev/null 2>&1; d=$?
check 20 "DNS inside answers allow-listed names only (with the proxy's address)" $c $d

# ---- the per-boot probe cache (9: never says more than the machine gives) ----
# A luarig inside a sandbox cannot make namespaces (seccomp), so it probes
# tier B and runs degraded (the control; read-only: tier B cannot keep the
# files the host interprets in a writable workspace, so a writable run is
# refused there). With a forged cache line there claiming tier A, its
# helper's unshare fails: exit 126, the target never runs.
NEST=$T/nest
mkdir -p "$NEST"
cp "$LUARIG" "$NEST/luarig"
cat >"$NEST/forge.sh" <<'EOF2'
# the line sandbox/probe.c (cache_key) writes for ./luarig on this boot
set -- $(stat -L -c '%d %i %s %.9Y' ./luarig)
printf 'luarig probe v1 boot=%s kernel=%s %s exe=%x:%x:%s:%s uid=%s gid=%s tier=A idmap=0\n' \
	"$(cat /proc/sys/kernel/random/boot_id)" "$(uname -r)" "$(uname -v)" "$1" "$2" "$3" "$4" \
	"$(id -u)" "$(id -g)"
EOF2
nest() { # script run inside a sandbox on $NEST (a sanitizer build: LeakSanitizer needs ptrace, refused inside)
	"$LUARIG" sandbox run --profile trusted --workspace "$NEST" --timeout 60 -- /bin/sh -c \
		"cd '$NEST'; export ASAN_OPTIONS=detect_leaks=0; $1"
}
CACHE_DIR='if [ "$(id -u)" = 0 ]; then echo /run/luarig; else echo "${XDG_RUNTIME_DIR:-/tmp}/luarig"; fi'
out=$(nest "mkdir -p /tmp/w; ./luarig sandbox run --profile readonly --workspace /tmp/w -- /bin/echo inner-ran" 2>&1); c=$?
[ "$out" = inner-ran ] || c=1
out=$(nest "mkdir -p /tmp/w; D=\$($CACHE_DIR); mkdir -p \$D; chmod 700 \$D;
	sh forge.sh >\$D/probe; chmod 600 \$D/probe;
	./luarig sandbox run --profile readonly --workspace /tmp/w -- /bin/echo inner-ran" 2>&1); r=$?
d=1
[ "$r" = 126 ] && case "$out" in *inner-ran*) ;; *unshare*) d=0 ;; esac
check probe-cache "a forged tier-A probe cache fails closed (status $r), never runs degraded" $c $d
# 28 (tier B): the luarig inside a sandbox runs degraded, with no pid
# namespace: its helper, a child subreaper, must end the run itself when
# luarig dies (SIGKILL) or ends it (SIGTERM: luarig frees the run), the
# setsid daemon included. Counted inside, by marker, once none is left or
# 20 s have passed.
for n in a b d; do cp /bin/sleep "$NEST/$M-ltB$n"; done
cat >"$NEST/lt-b.sh" <<'EOF'
# lt-b.sh SIG MARKER: a run of ./luarig here, ended with SIG once it runs;
# prints "up=N left=M": the three running (their command lines start with
# a marker: luarig's own names them too), then what is left (any process
# naming a marker, and the helper)
sig=$1 m=$2 d=$(pwd)
./luarig sandbox run --profile readonly --workspace "$d" -- /bin/sh -c \
	"setsid '$d/${m}d' 300 & '$d/${m}a' 300 & exec '$d/${m}b' 300" >/dev/null 2>&1 &
lp=$!
i=0
until pgrep -f "^$d/${m}d " && pgrep -f "^$d/${m}a " && pgrep -f "^$d/${m}b "; do
	i=$((i + 1)); [ $i -ge 400 ] && break; sleep 0.05
done >/dev/null
up=$(pgrep -f "^$d/$m" | wc -l)
h=$(pgrep -P $lp)
kill -$sig $lp
wait $lp
i=0
while pgrep -f "$d/$m" >/dev/null || { [ -n "$h" ] && kill -0 $h 2>/dev/null; }; do
	i=$((i + 1)); [ $i -ge 400 ] && break; sleep 0.05
done
left=$(pgrep -f "$d/$m" | wc -l)
[ -n "$h" ] && kill -0 $h 2>/dev/null && left=$((left + 1))
echo "up=$up left=$left"
EOF
for sig in KILL TERM; do
	out=$(nest "sh lt-b.sh $sig $M-ltB" 2>/dev/null)
	d=1
	[ "$out" = "up=3 left=0" ] && d=0
	check 28 "tier B (a luarig inside a sandbox): luarig ended with SIG$sig while the command, a child and a daemon run ($out)" $c28 $d
done

# the cache as root: /run/luarig 0700, probe 0600, and a garbage line is a miss
if [ "$(id -u)" = 0 ]; then
	"$LUARIG" sandbox check >/dev/null 2>&1; c=$?
	d=0
	[ "$(stat -c '%a %U' /run/luarig 2>/dev/null)" = "700 root" ] || d=1
	[ "$(stat -c '%a %U' /run/luarig/probe 2>/dev/null)" = "600 root" ] || d=1
	grep -q "^luarig probe v1 boot=$(cat /proc/sys/kernel/random/boot_id) " /run/luarig/probe || d=1
	echo "luarig probe v1 garbage tier=A" >/run/luarig/probe
	box /bin/true || d=1
	! grep -q garbage /run/luarig/probe || d=1 # rewritten after the fresh probe
	# a remembered "no idmapped /etc": the spec carries the walk's masks instead
	if grep -q ' idmap=1$' /run/luarig/probe; then
		sed -i 's/ idmap=1$/ idmap=0/' /run/luarig/probe
		sh_box "head -c 1 /etc/shadow | grep -q ." >/dev/null 2>&1 && d=1
		sh_box "ls /etc/ssl/private 2>/dev/null | grep -q ." >/dev/null 2>&1 && d=1
		sh_box "cat /etc/passwd >/dev/null" >/dev/null 2>&1 || d=1
		"$LUARIG" sandbox check >/dev/null 2>&1 # probes afresh: the true line again
	fi
	check probe-cache "the probe cache is root's 0600 file in a 0700 /run/luarig; a garbage line is re-probed; without the idmapped /etc the masks hide root's files" $c $d
fi

# ---- development work (26) ----
R=$WS/dev
git init -q "$R" 2>/dev/null; c=$?
rm -rf "$R"
sh_box "set -e; git init -q '$R'; cd '$R'; mkdir -p src lib; echo a > src/a.c; git add -A;
  git -c user.name=t -c user.email=t@e commit -q -m one; git mv src/a.c lib/a.c;
  git -c user.name=t -c user.email=t@e commit -q -m two; git gc -q; git log --oneline | wc -l | grep -q 2" \
	>/dev/null 2>&1; d=$?
check 26 "git init, add, commit, mv across directories and gc work inside" $c $d

# ---- files the host interprets later (28-43) ----
# Each attack leaves something in a repository of the workspace that would make
# git on the host run a program later. The program writes the marker $MK, so the
# marker proves that host git ran something the command wrote. The control does
# the same directly on the host (the marker must appear), the case confined (it
# must not). Host git runs with its own global config (a git-lfs style filter
# driver, as `git lfs install` leaves one, and file:// submodules allowed).
HW=$T/hw
mkdir -p "$HW"
MK=$T/host-ran
FSM="echo fsmonitor >> $MK; false"
HGC=$T/host.gitconfig
printf '[user]\n\tname = t\n\temail = t@e\n[filter "lfs"]\n\tclean = "sh -c \047echo lfs >> %s; cat\047"\n\tsmudge = cat\n[protocol "file"]\n\tallow = always\n' \
	"$MK" >"$HGC"
hg() { GIT_CONFIG_GLOBAL=$HGC GIT_CONFIG_NOSYSTEM=1 git "$@"; } # git as the person at the host runs it
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e
hbox() { # workspace script: run script confined in the trusted profile on workspace
	"$LUARIG" sandbox run --profile trusted --workspace "$1" --timeout 60 -- /bin/sh -c "$2"
}
R=$HW/r
mkdir -p "$T/empty-template"
repo() { # dir [init args...]: a repository with one commit, made by the host user
	d=$1
	shift
	rm -rf "$d"
	hg init -q "$@" "$d" && echo a >"$d/a" && mkdir -p "$d/src" && echo s >"$d/src/s" &&
		hg -C "$d" add -A && hg -C "$d" commit -qm init
}
setup_plain() { rm -rf "$HW"/*; repo "$R"; }
setup_nested() { setup_plain && repo "$R/vendor/lib" && echo vendor/ >"$R/.gitignore"; }
setup_wtconfig() { setup_plain && hg -C "$R" config core.repositoryformatversion 1 &&
	hg -C "$R" config extensions.worktreeConfig true; }
setup_nohooks() { rm -rf "$HW"/*; repo "$R" --template="$T/empty-template"; }
setup_sub() {
	setup_plain && repo "$T/subsrc" && hg -C "$R" submodule add -q "$T/subsrc" sub >/dev/null 2>&1 &&
		hg -C "$R" commit -qm sub
}
st() { hg -C "$R" status; }
# what else a person runs in the repository: diff, checkout, fetch (with submodules)
many() {
	hg -C "$R" status
	hg -C "$R" diff
	hg -C "$R" checkout -q -b other-$$
	hg -C "$R" fetch -q --recurse-submodules=yes "$R" 2>/dev/null
}
marked() { [ -e "$MK" ]; }
# hcase N what setup script after [verify [workspace]]: the attack script runs in
# $R (as a file in the workspace), then the host runs after; verify (default: the
# marker exists) tells whether the attack worked.
hcase() {
	n=$1 what=$2 setup=$3 script=$4 after=$5 verify=${6:-marked} hws=${7:-$HW}
	rm -f "$MK"
	$setup >/dev/null 2>&1
	printf 'export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e\n%s\n' "$script" >"$hws/.attack.sh"
	(cd "$R" && sh "$hws/.attack.sh") >/dev/null 2>&1
	$after >/dev/null 2>&1
	$verify; c=$?
	rm -f "$MK" "$hws/.ran"
	$setup >/dev/null 2>&1
	printf 'export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e\n%s\n' "$script" >"$hws/.attack.sh"
	hbox "$hws" ": > '$hws/.ran'; cd '$R' && sh '$hws/.attack.sh'" >"$T/hcase.out" 2>&1
	$after >/dev/null 2>&1
	! $verify; d=$?
	if [ "${HCASE_REFUSED:-}" = "" ] && [ ! -e "$hws/.ran" ]; then
		notok "$n $what: the confined command did not run: $(head -c 300 "$T/hcase.out")"
		return
	fi
	check "$n" "$what" $c $d
}

hcase 28 "a .git/commondir pointing at a copy whose config sets core.fsmonitor is not created" setup_plain \
	"cp -r .git ../evil.git; git --git-dir=../evil.git config core.fsmonitor '$FSM'; echo ../../evil.git > .git/commondir" st
nst() { hg -C "$R/vendor/lib" status; }
hcase 29 "nor in a nested repository at depth (vendor/lib/.git/commondir)" setup_nested \
	"cd vendor/lib; cp -r .git ../../../evil.git; git --git-dir=../../../evil.git config core.fsmonitor '$FSM'; echo ../../../../evil.git > .git/commondir" nst
hcase 30 "a .git/config.worktree setting core.fsmonitor is not created (extensions.worktreeConfig on)" setup_wtconfig \
	"printf '[core]\n\tfsmonitor = %s\n' '$FSM' > .git/config.worktree" st
add_a() { echo b >>"$R/a"; hg -C "$R" add a; }
hcase 31 ".git/info/attributes selecting a filter driver is not created" setup_plain \
	"echo '* filter=lfs' > .git/info/attributes" add_a
hcase 31 "nor after renaming .git/info away" setup_plain \
	"mv .git/info .git/info.old; mkdir -p .git/info; echo '* filter=lfs' > .git/info/attributes" add_a
alt() { [ -e "$R/.git/objects/info/alternates" ] || [ -e "$R/.git/objects/info.old" ]; }
hcase 32 ".git/objects/info/alternates is not created, nor is objects/info renamed away" setup_plain \
	"mv .git/objects/info .git/objects/info.old; mkdir -p .git/objects/info; echo /tmp > .git/objects/info/alternates" ":" alt
commit_a() { echo c >>"$R/a"; hg -C "$R" commit -qam c; }
hcase 33 "a pre-commit hook is not created in a repository made without hooks" setup_nohooks \
	"mkdir -p .git/hooks; printf '#!/bin/sh\necho hook >> $MK\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit" commit_a
hcase 34 "a submodule's git directory (.git/modules/sub/config) does not gain core.fsmonitor" setup_sub \
	"git --git-dir=.git/modules/sub config core.fsmonitor '$FSM'" st
hcase 34 "nor a hook host diff, checkout or fetch would run" setup_sub \
	"git --git-dir=.git/modules/sub config core.fsmonitor '$FSM'; printf '#!/bin/sh\necho hook >> $MK\n' > .git/modules/sub/hooks/post-checkout; chmod +x .git/modules/sub/hooks/post-checkout" many
hcase 35 "a submodule's .git file is not repointed at a git directory the command made" setup_sub \
	"cp -r .git/modules/sub ../evilsub.git; git config --file ../evilsub.git/config core.fsmonitor '$FSM'; git config --file ../evilsub.git/config core.worktree '$R/sub'; rm -f sub/.git || mv sub/.git sub/.git.old; echo 'gitdir: $HW/evilsub.git' > sub/.git" st
hcase 36 "a submodule the command registers (gitlink, its own .git) is not entered by host git" setup_plain \
	"git init -q evil && cd evil && git commit -q --allow-empty -m e && git config core.fsmonitor '$FSM' && cd .. && git add evil" st
hcase 36 "nor by host diff, checkout or fetch --recurse-submodules" setup_plain \
	"git init -q evil && cd evil && git commit -q --allow-empty -m e && git config core.fsmonitor '$FSM' && printf '#!/bin/sh\necho hook >> $MK\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && cd .. && git add evil && git commit -qm sub" many
nomod() { marked || [ -e "$R/.git/modules/evil" ]; }
hcase 37 ".git/modules gains no entry; a .gitmodules submodule with a .git file is not entered" setup_sub \
	"git init -q --separate-git-dir=.git/modules/evil evil; cd evil && git commit -q --allow-empty -m e && git config core.fsmonitor '$FSM' && cd ..; printf '[submodule \"evil\"]\n\tpath = evil\n\turl = ./evil\n' >> .gitmodules; git add .gitmodules evil" st nomod
nomod2() { marked || [ -e "$R/.git/modules" ]; }
hcase 37 "nor a repository that had no .git/modules" setup_plain \
	"mkdir -p .git/modules; git init -q --separate-git-dir=.git/modules/evil evil; cd evil && git commit -q --allow-empty -m e && git config core.fsmonitor '$FSM' && cd ..; git add evil" st nomod2
srcst() { hg -C "$R/src" status; }
hcase 38 "a bare repository planted in a tracked directory is not used by host git there" setup_plain \
	"cd src && mkdir objects refs refs/heads && echo 'ref: refs/heads/master' > HEAD && printf '[core]\n\tbare = false\n\tworktree = ..\n\trepositoryformatversion = 0\n\tfsmonitor = %s\n' '$FSM' > config" srcst
setup_include() { setup_plain && : >"$R/common.gitconfig" && hg -C "$R" config include.path ../common.gitconfig; }
hcase 43 "a config file the repository's config includes from the worktree does not gain core.fsmonitor" setup_include \
	"printf '[core]\n\tfsmonitor = %s\n' '$FSM' >> common.gitconfig" st
# 39: the workspace is a directory of a repository; a .git made at its top takes over git there
OUT=$T/outer
setup_outer() { repo "$OUT" && mkdir -p "$OUT/ws" && echo w >"$OUT/ws/w" && hg -C "$OUT" add -A && hg -C "$OUT" commit -qm w; }
outst() { hg -C "$OUT/ws" status; }
R_SAVE=$R
R=$OUT/ws
hcase 39 "a .git made in a workspace that is a directory of a repository is not used by host git there" setup_outer \
	"git init -q . && git config core.fsmonitor '$FSM'" outst marked "$OUT/ws"
R=$R_SAVE

# 40: the editor, agent and CI names at the top of the workspace: missing ones cannot
# be created, existing ones stay as they are, and nothing is left behind
NAMES_SCRIPT="mkdir -p .vscode && echo '{}' > .vscode/tasks.json; echo 'echo x' > .envrc; mkdir -p .claude && echo '{}' > .claude/settings.json;
mkdir -p .github/workflows && echo 'on: push' > .github/workflows/x.yml; echo '{}' > .mcp.json; mkdir -p .idea .devcontainer .cursor;
echo x > .idea/x.xml; echo '{}' > .devcontainer/devcontainer.json; echo '{}' > .cursor/mcp.json"
names_present() { # 0 when any of the names exists at the top of $HW
	for x in .vscode .envrc .claude .github .mcp.json .idea .devcontainer .cursor; do [ -e "$HW/$x" ] && return 0; done
	return 1
}
rm -rf "$HW"/* "$HW"/.[!.]*
(cd "$HW" && sh -c "$NAMES_SCRIPT") >/dev/null 2>&1
names_present; c=$?
rm -rf "$HW"/* "$HW"/.[!.]*
hbox "$HW" "cd '$HW'; $NAMES_SCRIPT" >/dev/null 2>&1
! names_present; d=$?
check 40 ".vscode/tasks.json, .envrc, .claude/settings.json, .github/workflows/x.yml, .mcp.json, .idea, .devcontainer, .cursor cannot be created at the top of the workspace, and no placeholder is left behind" $c $d
mkdir -p "$HW/.vscode" "$HW/.github"
echo '{"a":1}' >"$HW/.vscode/settings.json"
cp "$HW/.vscode/settings.json" "$T/vs.orig"
(echo x >>"$HW/.vscode/settings.json" && cp "$T/vs.orig" "$HW/.vscode/settings.json") 2>/dev/null; c=$?
hbox "$HW" "echo pwned > '$HW/.vscode/settings.json'; echo '{}' > '$HW/.vscode/tasks.json'; mkdir -p '$HW/.github/workflows' && echo x > '$HW/.github/workflows/x.yml'" >/dev/null 2>&1
d=0
cmp -s "$HW/.vscode/settings.json" "$T/vs.orig" || d=1
[ -e "$HW/.vscode/tasks.json" ] && d=1
[ -e "$HW/.github/workflows" ] && d=1
check 40 "an existing .vscode stays as it was; .github/workflows cannot be made in an existing .github" $c $d
rm -rf "$HW"/* "$HW"/.[!.]*
# a name the profile adds (--protect); the names at the top of a repository in the workspace
repo "$R"
(cd "$HW" && echo 1.0 >.tool-versions) 2>/dev/null; c=$?
rm -f "$HW/.tool-versions" "$HW/ran"
"$LUARIG" sandbox run --profile trusted --workspace "$HW" --protect .tool-versions -- /bin/sh -c \
	"echo > '$HW/ran'; echo 1.0 > '$HW/.tool-versions'" >/dev/null 2>&1
d=0
[ -e "$HW/ran" ] || d=1
[ -e "$HW/.tool-versions" ] && d=1
hbox "$HW" "echo 1.0 > '$HW/.tool-versions'" >/dev/null 2>&1 || d=1 # without --protect it may
check 40 "a name the profile adds (--protect) cannot be created" $c $d
(mkdir -p "$R/.vscode" && rmdir "$R/.vscode") 2>/dev/null; c=$?
hbox "$HW" "mkdir -p '$R/.vscode' && echo '{}' > '$R/.vscode/tasks.json'" >/dev/null 2>&1
! [ -e "$R/.vscode/tasks.json" ]; d=$?
check 40 ".vscode made at the top of a repository inside the workspace does not survive the run" $c $d
rm -rf "$HW"/* "$HW"/.[!.]*

# 41: a protected entry that is a symbolic link could be replaced: the run is refused, saying why
setup_linkhooks() { setup_plain && mkdir -p "$R/githooks" && rm -rf "$R/.git/hooks" && ln -s ../githooks "$R/.git/hooks"; }
HCASE_REFUSED=1 hcase 41 "a symlinked .git/hooks is not replaced by a hook (the run is refused)" setup_linkhooks \
	"rm -f .git/hooks; mkdir -p .git/hooks; printf '#!/bin/sh\necho hook >> $MK\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit" commit_a
unset HCASE_REFUSED
grep -q "symbolic link" "$T/hcase.out" || notok "41 the refusal does not say why: $(head -c 300 "$T/hcase.out")"

# 42: a profile may make every git directory read-only (--git-readonly): commit fails inside
setup_plain
hbox "$HW" "cd '$R' && echo b >> a && git -c user.name=t -c user.email=t@e commit -qam two" >/dev/null 2>&1; c=$?
before=$(hg -C "$R" rev-parse HEAD)
rm -f "$HW/ran"
"$LUARIG" sandbox run --profile trusted --workspace "$HW" --git-readonly -- /bin/sh -c \
	"echo > '$HW/ran'; cd '$R' && echo c >> a && git -c user.name=t -c user.email=t@e commit -qam three" >/dev/null 2>&1; r=$?
d=0
[ -e "$HW/ran" ] || d=1
[ $r -eq 0 ] && d=1
[ "$(hg -C "$R" rev-parse HEAD)" = "$before" ] || d=1
check 42 "with --git-readonly nothing in .git can be written (git commit fails inside, status $r); without it commit works" $c $d
rm -rf "$HW" "$OUT"

# ---- again as an unprivileged user (1, 3, 6, 10, 11) ----
if [ "$(id -u)" = 0 ] && command -v useradd >/dev/null; then
	U=lrsbx
	id "$U" >/dev/null 2>&1 || useradd -m -s /bin/sh "$U" 2>/dev/null
	UH=$(getent passwd "$U" | cut -d: -f6)
	if [ -n "$UH" ] && [ -d "$UH" ]; then
		setup_home "$UH"
		chown -R "$U:$U" "$UH"
		UWS=$UH/ws
		rm -rf "/tmp/luarig-$(id -u "$U")" # the probe cache the user's first run writes
		mkdir -p "$UWS" && chown "$U:$U" "$UWS"
		as_user() { runuser -u "$U" -- env HOME="$UH" PATH=/usr/bin:/bin "$@"; }
		ubox() { as_user "$LUARIG" sandbox run --profile trusted --workspace "$UWS" --timeout 60 -- /bin/sh -c "$1"; }
		as_user cat "$UH/.ssh/id_rsa" >/dev/null 2>&1; c=$?
		! ubox "cat '$UH/.ssh/id_rsa'" >/dev/null 2>&1; d=$?
		check 1 "as user $U: secrets by absolute path are not readable" $c $d
		cp "$UH/.bashrc" "$T/ub.orig"
		ubox "echo x >> '$UH/.bashrc'" >/dev/null 2>&1
		cmp -s "$UH/.bashrc" "$T/ub.orig"; d=$?
		as_user sh -c "echo >> '$UH/.bashrc'" 2>/dev/null; c=$?
		check 6 "as user $U: the real home's dotfiles are not writable" $c $d
		as_user sleep 300 &
		sleep 0.3
		UPID=$(pgrep -u "$U" -n sleep)
		pids="$pids $UPID"
		as_user sh -c "kill -0 $UPID && cat /proc/$UPID/environ >/dev/null"; c=$?
		! ubox "kill -0 $UPID || cat /proc/$UPID/environ" >/dev/null 2>&1; d=$?
		check 10 "as user $U: a process of the same user cannot be signalled or inspected" $c $d
		kill "$UPID" 2>/dev/null
		inside=$(ubox "awk '/^CapEff/ {print \$2}' /proc/self/status" 2>/dev/null)
		[ "$inside" = 0000000000000000 ]; d=$?
		check 13 "as user $U: CapEff is 0 inside" 0 $d
		UC=/tmp/luarig-$(id -u "$U")
		[ "$(stat -c '%a %U' "$UC" 2>/dev/null) $(stat -c '%a %U' "$UC/probe" 2>/dev/null)" = "700 $U 600 $U" ]; d=$?
		check probe-cache "as user $U: the probe cache is the user's 0600 file in a 0700 $UC" 0 $d
		# 28 as the user (setpriv execs, so the pid killed is luarig's)
		LT_OWNER=$U
		AS_U="setpriv --reuid=$U --regid=$U --init-groups env HOME=$UH PATH=/usr/bin:/bin"
		lt_cli ucli $AS_U; d=$?
		check 28 "as user $U: luarig sandbox run killed (SIGKILL) while the command, a child and a daemon run: $left left" $c28 $d
		lt_stop unshare usetup $AS_U "$T/stopat" unshare __sandbox-helper "$LUARIG" sandbox run \
			--profile trusted --workspace "$T/lt-usetup" -- /bin/sh -c "$(lt_cmd "$T/lt-usetup" usetup)"; d=$?
		lt_check "as user $U: luarig sandbox run killed (SIGKILL) during set-up (the helper entering unshare)" $d
		LT_OWNER=
		# 29 as the user: the socket families (the control as the user too)
		if [ -x "$WS/sockets" ]; then
			cp "$WS/sockets" "$UWS/sockets" && chown "$U:$U" "$UWS/sockets"
			as_user "$UWS/sockets" >"$T/usock.ctl"
			as_user "$LUARIG" sandbox run --profile trusted --workspace "$UWS" --timeout 60 -- \
				"$UWS/sockets" >"$T/usock.box" 2>/dev/null
			sock_check "as user $U: " "$T/usock.ctl" "$T/usock.box"
		fi
	else
		notok "user cases: cannot create the unprivileged user $U"
	fi
fi
