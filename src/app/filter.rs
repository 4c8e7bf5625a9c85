//! The `/` filter: a case-insensitive regex over the visible columns,
//! `!re` inverse, `-f text` fuzzy on the name, `-l k=v,k2!=v2,k3` a label
//! selector. Parsed once per keystroke, matched over prepared row data.

use nucleo_matcher::pattern::{AtomKind, CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher, Utf32Str};

use super::rows::Row;

/// A parsed filter.
#[derive(Debug, Default)]
pub enum Filter {
    /// Everything matches.
    #[default]
    All,
    Regex {
        re: regex::Regex,
        inverse: bool,
    },
    Fuzzy(Pattern),
    Labels(Vec<LabelTerm>),
    /// The text does not parse: nothing is hidden, the reason is shown.
    Invalid(String),
}

/// One term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelTerm {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl Filter {
    /// Parses what was typed after `/`.
    pub fn parse(text: &str) -> Filter {
        let t = text.trim();
        if t.is_empty() {
            return Filter::All;
        }
        if let Some(rest) = t.strip_prefix("-f") {
            let q = rest.trim();
            if q.is_empty() {
                return Filter::All;
            }
            return Filter::Fuzzy(Pattern::new(
                q,
                CaseMatching::Ignore,
                Normalization::Smart,
                AtomKind::Fuzzy,
            ));
        }
        if let Some(rest) = t.strip_prefix("-l") {
            return match parse_selector(rest.trim()) {
                Ok(terms) if terms.is_empty() => Filter::All,
                Ok(terms) => Filter::Labels(terms),
                Err(e) => Filter::Invalid(e),
            };
        }
        let (inverse, pattern) = match t.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, t),
        };
        if pattern.is_empty() {
            return Filter::All;
        }
        // Rows' search text is lower-cased already: a pattern without
        // upper-case letters needs no case folding (cheaper to build and
        // run); one with them gets it, so `PLAN` still matches.
        match regex::RegexBuilder::new(pattern)
            .case_insensitive(pattern.chars().any(char::is_uppercase))
            .size_limit(1 << 20)
            .build()
        {
            Ok(re) => Filter::Regex { re, inverse },
            Err(e) => Filter::Invalid(format!("not a valid regex: {}", first_line(&e.to_string()))),
        }
    }

    /// Why the text did not parse.
    pub fn error(&self) -> Option<&str> {
        match self {
            Filter::Invalid(e) => Some(e),
            _ => None,
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Filter::All | Filter::Invalid(_))
    }

    /// Indices (in `order`) of the rows of `rows` that match and pass `keep`.
    pub fn apply<R: Row>(
        &self,
        rows: &[R],
        order: &[u32],
        keep: impl Fn(&R) -> bool,
        matcher: &mut Matcher,
    ) -> Vec<u32> {
        let mut out = Vec::with_capacity(order.len());
        let mut buf = Vec::new();
        for &i in order {
            let Some(r) = rows.get(i as usize) else {
                continue;
            };
            if !keep(r) {
                continue;
            }
            let ok = match self {
                Filter::All | Filter::Invalid(_) => true,
                Filter::Regex { re, inverse } => re.is_match(r.search()) != *inverse,
                Filter::Fuzzy(p) => p
                    .score(Utf32Str::new(r.name_lc(), &mut buf), matcher)
                    .is_some(),
                Filter::Labels(terms) => terms.iter().all(|t| t.matches(r.labels())),
            };
            if ok {
                out.push(i);
            }
        }
        out
    }
}

/// A matcher for [`Filter::apply`] (reused: it holds scratch memory).
pub fn matcher() -> Matcher {
    Matcher::new(Config::DEFAULT)
}

fn first_line(s: &str) -> &str {
    s.lines().last().unwrap_or(s).trim()
}

impl LabelTerm {
    fn matches(&self, labels: &super::rows::Labels) -> bool {
        match self {
            LabelTerm::Equals(k, v) => labels.get(k) == Some(v.as_str()),
            LabelTerm::NotEquals(k, v) => labels.get(k) != Some(v.as_str()),
            LabelTerm::Exists(k) => labels.contains_key(k),
            LabelTerm::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma separated.
pub fn parse_selector(s: &str) -> Result<Vec<LabelTerm>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let term = if let Some((k, v)) = part.split_once("!=") {
            LabelTerm::NotEquals(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            LabelTerm::Equals(k.trim().into(), v.trim().into())
        } else if let Some(k) = part.strip_prefix('!') {
            LabelTerm::NotExists(k.trim().into())
        } else {
            LabelTerm::Exists(part.into())
        };
        let key = match &term {
            LabelTerm::Equals(k, _)
            | LabelTerm::NotEquals(k, _)
            | LabelTerm::Exists(k)
            | LabelTerm::NotExists(k) => k,
        };
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!(
                "label selector term {part:?}: expected key=value, key!=value, key or !key"
            ));
        }
        out.push(term);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::rows::Labels;

    struct R {
        name: String,
        search: String,
        labels: Labels,
    }
    impl Row for R {
        fn key(&self) -> &str {
            &self.name
        }
        fn name(&self) -> &str {
            &self.name
        }
        fn search(&self) -> &str {
            &self.search
        }
        fn name_lc(&self) -> &str {
            &self.name
        }
        fn labels(&self) -> &Labels {
            &self.labels
        }
        fn pool(&self) -> Option<&str> {
            None
        }
        fn when(&self) -> Option<jiff::Timestamp> {
            None
        }
        fn status(&self) -> &str {
            ""
        }
    }

    fn rows() -> Vec<R> {
        [
            (
                "plan-network",
                "plan-network platform running agent-0",
                "team=net",
            ),
            (
                "apply-database",
                "apply-database platform failed agent-1 exit 3",
                "team=db",
            ),
            ("plan-dns", "plan-dns batch succeeded", ""),
        ]
        .into_iter()
        .map(|(n, s, l)| R {
            name: n.into(),
            search: s.into(),
            labels: l
                .split_once('=')
                .map(|(k, v)| Labels::from([(k.to_owned(), v.to_owned())]))
                .unwrap_or_default(),
        })
        .collect()
    }

    fn names(f: &str) -> Vec<String> {
        let rows = rows();
        let order: Vec<u32> = (0..3).collect();
        Filter::parse(f)
            .apply(&rows, &order, |_| true, &mut matcher())
            .into_iter()
            .map(|i| rows[i as usize].name.clone())
            .collect()
    }

    #[test]
    fn each_filter_form_selects_the_rows_it_names() {
        let cases: &[(&str, &[&str])] = &[
            ("", &["plan-network", "apply-database", "plan-dns"]),
            ("plan", &["plan-network", "plan-dns"]),
            ("PLAN", &["plan-network", "plan-dns"]),
            ("fail|succ", &["apply-database", "plan-dns"]),
            ("^apply", &["apply-database"]),
            ("!plan", &["apply-database"]),
            ("!", &["plan-network", "apply-database", "plan-dns"]),
            ("running agent", &["plan-network"]),
            ("-f pnw", &["plan-network"]),
            ("-f adb", &["apply-database"]),
            ("-l team=db", &["apply-database"]),
            ("-l team!=db", &["plan-network", "plan-dns"]),
            ("-l team", &["plan-network", "apply-database"]),
            ("-l !team", &["plan-dns"]),
            ("-l team=net,team!=db", &["plan-network"]),
            ("(unclosed", &["plan-network", "apply-database", "plan-dns"]),
        ];
        for (f, want) in cases {
            assert_eq!(names(f), *want, "filter {f:?}");
        }
    }

    #[test]
    fn a_bad_filter_says_why() {
        assert!(
            Filter::parse("(unclosed")
                .error()
                .is_some_and(|e| e.contains("regex"))
        );
        assert!(
            Filter::parse("-l a b")
                .error()
                .is_some_and(|e| e.contains("key=value"))
        );
        assert!(Filter::parse("ok").error().is_none());
    }
}
