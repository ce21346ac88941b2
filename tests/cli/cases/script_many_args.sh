# A script with a long command line: every argument reaches arg and ...
# (the main task's thread once had room for about 20 and crashed past it).
printf 'print(#arg, select("#", ...), arg[#arg], (select(select("#", ...), ...)))\n' > many.lua
"$LUARIG" many.lua $(seq 1 200)
echo "run: $?"
