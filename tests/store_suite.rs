//! The store conformance suite (`shrinkfs_fuse::store::suite`) over the whole stack on a real S3
//! server (`rclone serve s3`), prefix and all: what the filesystem core relies on holds there too.

mod common;

use shrinkfs_fuse::credentials::{AwsEnv, CredentialsConfig};
use shrinkfs_fuse::store::{self, S3Options, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_over_an_s3_server_passes_the_store_suite() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("s3");
    std::fs::create_dir_all(root.join("bkt")).unwrap();
    let Some(server) = common::s3_server(&root) else {
        println!("SKIPPED: no rclone for a local S3 server (scripts/setup.sh --test installs it)");
        return;
    };
    let env = AwsEnv::new(server.env().into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    let s3 = S3Options {
        endpoint_url: Some(server.endpoint.clone()),
        credentials: CredentialsConfig { env, ..CredentialsConfig::default() },
        ..S3Options::default()
    };
    let bucket = store::open(&Source::S3 { bucket: "bkt".into(), prefix: "pre/fix".into() }, &s3).await.unwrap();
    assert!(bucket.pages.is_some() && bucket.multipart.is_some(), "S3's extensions come through the stack");
    store::suite::run(bucket.store.clone(), "").await;
    // Keys are the prefix's: rclone keeps each object as a file under the bucket's directory.
    let key = object_store::path::Path::from("seen");
    bucket.store.put(&key, "here".into()).await.unwrap();
    assert_eq!(std::fs::read(root.join("bkt/pre/fix/seen")).unwrap(), b"here");
}
