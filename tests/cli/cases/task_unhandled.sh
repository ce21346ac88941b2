# A background task's error is reported, the main task still finishes, the exit code says it failed.
"$LUARIG" -e 'rig.spawn(function() error("background failure") end); rig.sleep(0.05); print("main done")' >out.txt 2>&1
code=$?
sed 's/^\t.*$/\t(traceback)/' out.txt | uniq
echo "luarig exited $code"
