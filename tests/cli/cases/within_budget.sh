"$LUARIG" --max-instructions 10M --max-memory 64M -e 'local s = 0 for i = 1, 1000 do s = s + i end print(s)'
