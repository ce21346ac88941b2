mkdir sandbox_run_env && cd sandbox_run_env || exit 9
# Secrets in the caller's environment never reach the command.
probe='env | grep -cE "^(FOO_TOKEN|DEPLOY_KEY|AWS_[A-Z_]*|GITHUB_TOKEN|SSH_AUTH_SOCK|OPENAI_API_KEY|DB_PASSWORD|UNLISTED)="'
export FOO_TOKEN=t DEPLOY_KEY=k AWS_SECRET_ACCESS_KEY=a GITHUB_TOKEN=g SSH_AUTH_SOCK=/x OPENAI_API_KEY=o DB_PASSWORD=p UNLISTED=u
[ "$(sh -c "$probe")" -ge 8 ] && echo "control: all present"
echo "confined: $("$LUARIG" sandbox run -- sh -c "$probe")"
echo "unconfined: $("$LUARIG" sandbox run --profile unconfined --ack-unconfined -- sh -c "$probe")"
LANG=C.UTF-8 "$LUARIG" sandbox run -- sh -c 'echo "LANG=$LANG"'
