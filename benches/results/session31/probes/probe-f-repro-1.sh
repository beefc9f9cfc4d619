#!/bin/bash
# repro-1 (LOW): the mount's start error says "no answer within 30 s (is the endpoint reachable?)"
# when the endpoint answered every try at once with HTTP 500 (s3rver 3.7.1 fails every truncated
# ListObjectsV2, e.g. a bucket of more than 1,000 keys).
source /tmp/probe31f/lib.sh
start_server s3rver ${1:-9521}; mkbucket bkt >/dev/null
python3 - <<'PY'
import boto3,os
from concurrent.futures import ThreadPoolExecutor
s=boto3.client('s3',endpoint_url=os.environ['ENDPOINT'],region_name='us-east-1')
with ThreadPoolExecutor(8) as ex: list(ex.map(lambda i: s.put_object(Bucket='bkt',Key=f'f{i:05d}',Body=b'1'),range(1001)))
PY
M=$P/r1m; mkdir -p $M
msg=$($BIN mount s3://bkt $M --endpoint-url $ENDPOINT --allow-http --gpu off --daemon 2>&1); rc=$?
mountpoint -q $M && $BIN unmount $M
stop_servers
echo "rc=$rc: ${msg:0:200}"
if echo "$msg" | grep -q "is the endpoint reachable" && echo "$msg" | grep -q "500 Internal Server Error"; then
  echo "FAIL: error blames reachability/no answer, though every try was answered with HTTP 500"
else echo "PASS"; fi
