//! Support-bundle figures: redaction throughput on one core.
//!
//! ```text
//! cargo bench --bench bundle
//! AGENTDECK_BENCH_MB=256 cargo bench --bench bundle
//! ```
//!
//! Prints what it measured; asserts nothing.

use std::io::Write;
use std::time::Instant;

use agentdeck::ops::bundle::redact::{RedactStream, Redactor};

/// Log lines as agents and their tools write them: mostly plain, some JSON,
/// a few with keywords and fewer with secrets.
const LINES: &[&str] = &[
    "[plan-42] Refreshing state... [id=vpc-0a1b2c3d4e5f67890]\n",
    "[plan-42] aws_instance.web[3]: Still creating... [1m20s elapsed]\n",
    "{\"level\":\"info\",\"ts\":\"2026-11-24T08:00:00Z\",\"msg\":\"task claimed\",\"task\":\"apply-7\",\"attempt\":1}\n",
    "{\"level\":\"debug\",\"ts\":\"2026-11-24T08:00:01Z\",\"msg\":\"heartbeat\",\"task\":\"apply-7\",\"elapsed_ms\":5012}\n",
    "2026-11-24T08:00:02Z INFO agentdeck::agent: polling for work pool=default idle=true\n",
    "[apply-7] module.network.aws_subnet.private[1]: Creation complete after 2s [id=subnet-0123]\n",
    "[apply-7] Plan: 12 to add, 0 to change, 3 to destroy.\n",
    "2026-11-24T08:00:03Z WARN reqwest: retrying request to https://api.example.com/v1/runs (attempt 2)\n",
    "[apply-7] Initializing provider plugins... - Finding hashicorp/aws versions matching \"~> 5.0\"...\n",
    "{\"level\":\"info\",\"msg\":\"token refreshed\",\"expires_in\":3600}\n",
    "[apply-7] export TF_VAR_db_password=S3cretPassw0rd-123\n",
    "[apply-7] Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJl\n",
    "2026-11-24T08:00:04Z INFO agentdeck::agent: task finished task=apply-7 exit=0 duration=93.2s\n",
    "[plan-42] Note: Objects have changed outside of Terraform\n",
    "[plan-42]   # aws_security_group.allow_tls will be updated in-place\n",
    "[plan-42]       ~ ingress = [ (known after apply) ]\n",
];

fn main() {
    let mb: usize = std::env::var("AGENTDECK_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut input = Vec::with_capacity(mb << 20);
    let mut i = 0usize;
    while input.len() < mb << 20 {
        // One secret line in about every 200.
        let line = LINES[i % LINES.len()];
        if (line.contains("password") || line.contains("Bearer")) && i % 100 != 10 && i % 100 != 11
        {
            i += 1;
            continue;
        }
        input.extend_from_slice(line.as_bytes());
        i += 1;
    }
    let redactor = Redactor::new(&[b"pool-token-0123456789".to_vec()]);
    for _ in 0..3 {
        let started = Instant::now();
        let mut s = RedactStream::new(&redactor, std::io::sink());
        for piece in input.chunks(64 * 1024) {
            s.write_all(piece).expect("sink");
        }
        let (_, counts) = s.finish().expect("sink");
        let secs = started.elapsed().as_secs_f64();
        println!(
            "redaction: {:.0} MB in {:.3} s on one core = {:.0} MB/s; {} matches {:?}",
            input.len() as f64 / 1e6,
            secs,
            input.len() as f64 / 1e6 / secs,
            counts.values().sum::<u64>(),
            counts
        );
    }
}
