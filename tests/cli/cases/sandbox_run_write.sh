mkdir -p sandbox_run_write/ws && cd sandbox_run_write/ws || exit 9
# readonly: nothing in the workspace is writable; trusted: it is.
"$LUARIG" sandbox run --profile readonly -- sh -c '{ echo x > f; } 2>/dev/null || echo denied'
test -e f && echo "f exists" || echo "f absent"
"$LUARIG" sandbox run --profile trusted -- sh -c 'echo x > f && echo written'
cat f
# Outside the workspace: denied when trusted; the unconfined run is the positive control.
"$LUARIG" sandbox run --profile trusted -- sh -c '{ echo x > ../outside; } 2>/dev/null || echo denied'
test -e ../outside && echo "outside exists" || echo "outside absent"
"$LUARIG" sandbox run --profile unconfined --ack-unconfined -- sh -c 'echo x > ../outside && echo written'
test -e ../outside && echo "outside exists" || echo "outside absent"
# .git/hooks stays read-only inside a writable workspace.
mkdir -p repo/.git/hooks
"$LUARIG" sandbox run -- sh -c '{ echo x > repo/.git/hooks/pre-commit; } 2>/dev/null || echo hook denied'
test -e repo/.git/hooks/pre-commit && echo "hook exists" || echo "hook absent"
