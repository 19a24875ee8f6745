#!/bin/bash
cd "$(dirname "$0")"
for s in spread dense; do
  for c in A B D C; do nice -n 10 ./lb -out long.jsonl -walinspect=false -warm 200000 -msgs 2000000 -cand $c -shape $s -db long_${c,,}_$s; done
done
echo ALLDONE
