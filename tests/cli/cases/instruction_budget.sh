# pcall cannot swallow the instruction budget, nor can a loop of pcalls
"$LUARIG" --max-instructions 200000 -e '
for i = 1, 10 do pcall(function() while true do end end) end
print("not reached")'
