#!/bin/bash
cd "$(dirname "$0")"
R="nice -n 10 ./lb -out results.jsonl"
for s in spread dense; do
  for c in A B C D E; do $R -cand $c -shape $s; done
done
$R -cand B -shape spread -fence share
for c in A B C D; do $R -cand $c -shape big; done
for s in spread dense; do
  for c in A B C D; do $R -cand $c -shape $s -nockpt -db ${c,,}_${s}_nockpt; done
done
echo ALLDONE
