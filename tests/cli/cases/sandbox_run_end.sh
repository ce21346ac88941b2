mkdir sandbox_run_end && cd sandbox_run_end || exit 9
# The run's end is told by its reaper as soon as the sandbox is empty: `sandbox
# run` exits with the command's status without waiting for its helper's own
# exit, which tears the namespaces down. Here the helper is stopped, so it
# cannot exit; a guard lets it go after 20 s, so a CLI that waits for it
# fails instead of hanging.
command -v pgrep >/dev/null || { echo "no pgrep"; exit 77; }
mkfifo go
"$LUARIG" sandbox run --workspace . -- sh -c 'touch ready; read x < go; exit 7' &
cli=$!
i=0
until [ -e ready ] || [ $i -ge 400 ]; do i=$((i + 1)); sleep 0.05; done
helper=$(pgrep -P $cli -f __sandbox-helper)
[ -n "$helper" ] && kill -STOP $helper && echo "helper stopped"
(sleep 20; [ -e done ] || { touch fired; kill -CONT $helper; }) >/dev/null 2>&1 &
echo x > go
wait $cli
echo "status: $?"
touch done
[ -e fired ] && echo "returned only once the helper went on" || echo "returned while the helper was stopped"
kill -CONT $helper 2>/dev/null
exit 0
