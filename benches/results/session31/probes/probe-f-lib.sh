# helper library for shrinkfs S3 probes
BIN=/work/bin-new/shrinkfs-s31base
P=/tmp/probe31f
export AWS_EC2_METADATA_DISABLED=true
PIDS=()
start_server() { # kind port [root]
  local kind=$1; local port=$2; local root=${3:-$P/root-$1-$2}
  case $kind in
    moto) export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
          moto_server -p $port > $P/srv-$kind-$port.log 2>&1 & ;;
    s3rver) export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
          [ -n "${NOWIPE:-}" ] || rm -rf $root; mkdir -p $root
          $P/s3rver-inst/node_modules/.bin/s3rver -d $root -p $port -a 127.0.0.1 --silent > $P/srv-$kind-$port.log 2>&1 & ;;
    rclone) export AWS_ACCESS_KEY_ID=ACCESS AWS_SECRET_ACCESS_KEY=SECRET
          mkdir -p $root
          rclone serve s3 --auth-key ACCESS,SECRET $root --addr 127.0.0.1:$port ${RCLONE_EXTRA:-} > $P/srv-$kind-$port.log 2>&1 & ;;
  esac
  SRVPID=$!; PIDS+=($SRVPID)
  export ENDPOINT=http://127.0.0.1:$port
  for i in $(seq 1 100); do curl -s -o /dev/null $ENDPOINT/ && break; sleep 0.2; done
}
mkbucket() { python3 - "$1" <<'PY'
import boto3,sys,os
s=boto3.client('s3',endpoint_url=os.environ['ENDPOINT'],region_name='us-east-1')
try: s.create_bucket(Bucket=sys.argv[1])
except Exception as e: print("create_bucket:",e)
PY
}
mnt() { # src mnt [flags...]
  local src=$1 m=$2; shift 2; mkdir -p $m
  $BIN mount "$src" "$m" --endpoint-url $ENDPOINT --allow-http --gpu off --daemon --log-file $P/mount-$(basename $m).log "$@"
}
umnt() { timeout 120 $BIN unmount $1; echo "unmount rc=$?"; }
stop_servers() { for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; PIDS=(); }
