//! The container recipe (`assets/Dockerfile`), checked as far as it can be
//! without a container engine: the binary needs no library the distroless
//! base lacks, and the image's user is the one the rendered pods ask for.

use std::process::Command;

const DOCKERFILE: &str = include_str!("../assets/Dockerfile");

/// What `gcr.io/distroless/cc-debian12` ships (glibc, libgcc) plus the
/// kernel's vDSO.
const IN_BASE_IMAGE: &[&str] = &[
    "linux-vdso.so.1",
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
];

#[test]
fn the_binary_links_only_libraries_the_base_image_has() {
    let out = match Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_agentdeck"))
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("note: ldd not available ({e}); nothing to check");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let libs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|l| l.rsplit('/').next().unwrap_or(l))
        .collect();
    assert!(libs.contains(&"libc.so.6"), "ldd said: {text}");
    for lib in &libs {
        assert!(
            IN_BASE_IMAGE.contains(lib),
            "{lib} is not in the distroless/cc base image; ldd said:\n{text}"
        );
    }
    for absent in ["libssl", "libcrypto", "libz"] {
        assert!(!text.contains(absent), "links {absent}: {text}");
    }
}

#[test]
fn the_image_runs_as_the_user_the_rendered_pods_expect() {
    let user = DOCKERFILE
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert_eq!(user.trim(), "65532:65532");
    let stages: Vec<&str> = DOCKERFILE
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(
        stages.len(),
        2,
        "build stage, then the runtime base: {stages:?}"
    );
    assert!(stages[1].contains("distroless/cc-debian12"), "{stages:?}");
    assert!(
        stages[0].contains("bookworm"),
        "built on the base's Debian release, so glibc matches: {stages:?}"
    );
    // The rendered daemon asks for the same user.
    let opts = agentdeck::install::InstallOptions {
        namespace: "agentdeck-system".into(),
        image: "x".into(),
        config: agentdeck::config::Config::default(),
        cluster_wide: false,
    };
    let objects = agentdeck::install::controller_objects(&opts).expect("rendered");
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the daemon's Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    // `agentdeck` is found on the base image's PATH.
    assert_eq!(pod["containers"][0]["command"][0], "agentdeck");
    assert!(DOCKERFILE.contains("/usr/local/bin/agentdeck"));
}
