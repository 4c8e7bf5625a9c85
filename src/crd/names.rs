//! Kubernetes object names derived from other names, kept within the API's limits.

/// Longest name that is also valid as a label value and a DNS label (Service,
/// Job and pod names are used as both).
pub const MAX_NAME_LEN: usize = 63;

/// `prefix + name`, or when that is longer than [`MAX_NAME_LEN`], a prefix of it
/// followed by `-` and 8 hex digits of a hash of the whole, so distinct long
/// names stay distinct and the result is stable across runs and versions.
pub fn bounded_name(prefix: &str, name: &str) -> String {
    bounded(&format!("{prefix}{name}"), MAX_NAME_LEN)
}

/// `full`, or a cut of it plus `-<hash>` so it fits in `max` characters.
pub fn bounded(full: &str, max: usize) -> String {
    if full.len() <= max {
        return full.to_string();
    }
    let hash = format!("{:08x}", fnv1a32(full.as_bytes()));
    let keep = max.saturating_sub(hash.len() + 1);
    // Names are ASCII (DNS-1123), so byte cuts are char cuts; trim so the cut
    // does not end in '-' or '.', which DNS-1123 forbids before our '-'.
    let head = full[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// 32-bit FNV-1a, the hash Kubernetes itself uses for pod-template-hash;
/// ten lines, so not worth a dependency.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Is `name` a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63)?
pub fn is_dns1123_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Is `name` a DNS-1123 subdomain (labels joined by '.', at most 253)?
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_as_they_are() {
        assert_eq!(bounded_name("iac-agent-", "prod"), "iac-agent-prod");
    }

    #[test]
    fn long_names_are_cut_to_63_with_a_stable_hash() {
        let long = "a".repeat(80);
        let n = bounded_name("iac-agent-", &long);
        assert_eq!(n.len(), 63);
        assert!(n.starts_with("iac-agent-aaaa"));
        assert_eq!(n, bounded_name("iac-agent-", &long));
        assert!(is_dns1123_label(&n));
    }

    #[test]
    fn long_names_differing_only_at_the_end_stay_distinct() {
        let a = bounded_name("", &format!("{}x", "a".repeat(70)));
        let b = bounded_name("", &format!("{}y", "a".repeat(70)));
        assert_ne!(a, b);
    }

    #[test]
    fn a_cut_ending_in_a_dash_is_trimmed() {
        let name = format!("{}-{}", "a".repeat(53), "b".repeat(20));
        let n = bounded(&name, 63);
        assert!(is_dns1123_label(&n), "{n}");
    }

    #[test]
    fn fnv1a_matches_reference_values() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn dns_label_rules() {
        for ok in ["a", "a-b", "0abc", "x1"] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
    }
}
