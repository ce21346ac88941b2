#!/bin/sh
# make soak: the kill storms side by side (docs/soak.md). Not part of make
# test or CI. Each storm prints its progress to stderr (its log is
# SOAK_DIR/<storm>.err) and one summary line; this script prints the
# summary lines in order and fails when any storm did.
#   KILLS=1000 LONG_TURNS=20000 CLUSTER_KILLS=1000 PARTITIONS=100 \
#   STORMS="lmdb nats server long cluster partition" sh tests/soak/run.sh
cd "$(dirname "$0")/../.." || exit 1
LUARIG=${LUARIG:-$PWD/build/luarig}
export LUARIG
KILLS=${KILLS:-1000}
STORMS=${STORMS:-"lmdb nats server long cluster partition"}
out=${SOAK_OUT:-$(mktemp -d /tmp/luarig-soak.XXXXXX)}
mkdir -p "$out"
echo "soak: $STORMS; logs in $out"
for s in $STORMS; do
	case $s in
	long) n=${LONG_TURNS:-$((KILLS * 20))} ;;
	cluster) n=${CLUSTER_KILLS:-$KILLS} ;;
	partition) n=${PARTITIONS:-$((KILLS / 10))} ;;
	*) n=$KILLS ;;
	esac
	SOAK_DIR="$out/$s" "$LUARIG" tests/soak/storm.lua "$s" "$n" >"$out/$s.sum" 2>"$out/$s.err" &
done
wait
rc=0
for s in $STORMS; do
	if [ -s "$out/$s.sum" ]; then
		cat "$out/$s.sum"
		grep -q ', lost 0, corrupt 0, restore failures 0' "$out/$s.sum" || rc=1
	else
		echo "soak $s: no summary (see $out/$s.err)"
		tail -n 5 "$out/$s.err" | sed 's/^/  | /'
		rc=1
	fi
done
exit $rc
