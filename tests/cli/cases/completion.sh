# The bash completion script (share/bash-completion/completions/luarig)
# completes commands, options, their values and session ids; driven as bash
# would, with COMP_WORDS and COMP_CWORD set, no terminal.
mkdir completion && cd completion || exit 9
command -v bash >/dev/null 2>&1 || { echo "no bash"; exit 77; }
script="$LUARIG_ROOT/share/bash-completion/completions/luarig"
# comp WORD...: the candidates for the last word, sorted, on one line
comp() {
	bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _luarig; printf "%s\n" "${COMPREPLY[@]}"' \
		_ "$script" "$LUARIG" "$@" 2>&1 | sort | tr '\n' ' ' | sed 's/ $//'
	echo
}
bash -c '. "$1"; complete -p luarig' _ "$script"
echo "== commands";          comp s
echo "== all of them";       comp ''
echo "== global options";    comp --
echo "== after an option";   comp --debug re
echo "== serve options";     comp serve --
echo "== a rig file";        touch rig.lua notes.txt; comp serve r
echo "== mcp";               comp mcp ''
echo "== mcp serve options"; comp mcp serve rig.lua --
echo "== sessions options";  comp sessions --
echo "== log options";       comp log --
echo "== snapshot commands"; comp snapshot ''
echo "== after --state";     mkdir -p stdir; comp snapshot --state std
echo "== sandbox";           comp sandbox ''
echo "== sandbox run";       comp sandbox run --
echo "== profiles";          comp sandbox run --profile ''
echo "== a bundle";          touch app.rig; comp inspect a
# session ids from the store the line names
cat > mk.lua <<'LUA'
local core = require "rig.core"
local store = assert(core.store_lmdb{ root = os.getenv("PWD") .. "/state" })
for i = 1, 2 do
  local s = assert(core.session_open(store))
  s:catalog{ title = "t" .. i, state = "stopped" }
  s:close()
  print(s.id)
end
LUA
"$LUARIG" mk.lua | sort >ids
one=$(head -n 1 ids)
two=$(tail -n 1 ids)
echo "== session ids"
comp log --state "$PWD/state" '' | sed -e "s/$one/ONE/" -e "s/$two/TWO/"
comp show --state "$PWD/state" "$(echo "$one" | cut -c1-8)" | sed -e "s/$one/ONE/"
echo "== no store: no ids, no error"
comp log --state "$PWD/nothing" ''
test -e nothing && echo "nothing was created" || echo "(nothing created)"
