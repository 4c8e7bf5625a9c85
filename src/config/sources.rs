//! Where configuration comes from: the places a file is looked for and the
//! environment, gathered in one value so tests never read the real ones.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{ConfigError, ENV_PREFIX};

/// Directory searched for system-wide configuration.
const ETC_DIR: &str = "/etc/agentdeck";

/// The places a configuration file may be and the environment variables that
/// may override it. [`ConfigSources::from_process`] fills it from the running
/// process; tests build it by hand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSources {
    /// `--config FILE`: when set, the only file considered; it must exist.
    pub explicit: Option<PathBuf>,
    /// The working directory.
    pub cwd: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME`; the file is looked for in its `agentdeck/`.
    pub xdg_config_home: Option<PathBuf>,
    /// `$HOME`; `.config/agentdeck/` below it is used when
    /// `xdg_config_home` is unset.
    pub home: Option<PathBuf>,
    /// The system directory (`/etc/agentdeck`).
    pub etc: Option<PathBuf>,
    /// The directory of the running binary.
    pub exe_dir: Option<PathBuf>,
    /// Environment variables (only those with a config prefix matter).
    pub env: Vec<(String, String)>,
}

impl ConfigSources {
    /// The sources of the running process, with `explicit` from `--config`.
    pub fn from_process(explicit: Option<PathBuf>) -> Self {
        let absolute_dir = |name: &str| {
            std::env::var_os(name)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
                // The XDG spec says relative paths are invalid and must be ignored.
                .filter(|path| path.is_absolute())
        };
        ConfigSources {
            explicit,
            cwd: std::env::current_dir().ok(),
            xdg_config_home: absolute_dir("XDG_CONFIG_HOME"),
            home: absolute_dir("HOME"),
            etc: Some(PathBuf::from(ETC_DIR)),
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(Path::to_owned)),
            env: config_env(std::env::vars_os()),
        }
    }

    /// Sources that find no file and hold no variables: the defaults.
    pub fn none() -> Self {
        Self::default()
    }

    /// The candidate files for `file_name`, in search order (without the
    /// explicit one).
    pub fn candidates(&self, file_name: &str) -> Vec<PathBuf> {
        let user_dir = match (&self.xdg_config_home, &self.home) {
            (Some(xdg), _) => Some(xdg.join("agentdeck")),
            (None, Some(home)) => Some(home.join(".config").join("agentdeck")),
            (None, None) => None,
        };
        [
            self.cwd.clone(),
            user_dir,
            self.etc.clone(),
            self.exe_dir.clone(),
        ]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(file_name))
        .collect()
    }

    /// The file to load: the explicit one (an error when missing), else the
    /// first candidate that is a file, else none.
    pub fn find(&self, file_name: &str) -> Result<Option<PathBuf>, ConfigError> {
        if let Some(path) = &self.explicit {
            if !path.exists() {
                return Err(ConfigError::ExplicitFileMissing { path: path.clone() });
            }
            if path.is_dir() {
                return Err(ConfigError::ExplicitNotAFile { path: path.clone() });
            }
            return Ok(Some(path.clone()));
        }
        Ok(self
            .candidates(file_name)
            .into_iter()
            .find(|path| path.is_file()))
    }
}

/// The variables with the config prefix; values that are not UTF-8 are kept
/// lossily so the loader can still name them in an error.
fn config_env(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(String, String)> {
    vars.filter_map(|(name, value)| {
        let name = name.into_string().ok()?;
        name.starts_with(ENV_PREFIX)
            .then(|| (name, value.to_string_lossy().into_owned()))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path) -> ConfigSources {
        let sources = ConfigSources {
            explicit: None,
            cwd: Some(root.join("cwd")),
            xdg_config_home: Some(root.join("xdg")),
            home: Some(root.join("home")),
            etc: Some(root.join("etc")),
            exe_dir: Some(root.join("bin")),
            env: Vec::new(),
        };
        for dir in [
            "cwd",
            "xdg/agentdeck",
            "home/.config/agentdeck",
            "etc",
            "bin",
        ] {
            std::fs::create_dir_all(root.join(dir)).expect("create dir");
        }
        sources
    }

    #[test]
    fn candidates_are_searched_in_documented_order() {
        let root = Path::new("/r");
        let sources = ConfigSources {
            cwd: Some(root.join("cwd")),
            xdg_config_home: Some(root.join("xdg")),
            home: Some(root.join("home")),
            etc: Some(root.join("etc")),
            exe_dir: Some(root.join("bin")),
            ..ConfigSources::none()
        };
        assert_eq!(
            sources.candidates("a.yaml"),
            vec![
                PathBuf::from("/r/cwd/a.yaml"),
                PathBuf::from("/r/xdg/agentdeck/a.yaml"),
                PathBuf::from("/r/etc/a.yaml"),
                PathBuf::from("/r/bin/a.yaml"),
            ]
        );
    }

    #[test]
    fn home_config_dir_is_used_only_when_xdg_is_unset() {
        let sources = ConfigSources {
            home: Some(PathBuf::from("/home/u")),
            ..ConfigSources::none()
        };
        assert_eq!(
            sources.candidates("a.yaml"),
            vec![PathBuf::from("/home/u/.config/agentdeck/a.yaml")]
        );
    }

    #[test]
    fn each_location_is_found_when_it_is_the_only_one() {
        let places = ["cwd", "xdg/agentdeck", "etc", "bin"];
        for place in places {
            let root = tempfile::tempdir().expect("temp dir");
            let sources = dirs(root.path());
            let file = root.path().join(place).join("a.yaml");
            std::fs::write(&file, "{}").expect("write");
            assert_eq!(
                sources.find("a.yaml").expect("found"),
                Some(file),
                "{place}"
            );
        }
    }

    #[test]
    fn home_location_is_found_when_xdg_is_unset() {
        let root = tempfile::tempdir().expect("temp dir");
        let sources = ConfigSources {
            xdg_config_home: None,
            ..dirs(root.path())
        };
        let file = root.path().join("home/.config/agentdeck/a.yaml");
        std::fs::write(&file, "{}").expect("write");
        assert_eq!(sources.find("a.yaml").expect("found"), Some(file));
    }

    #[test]
    fn the_first_location_found_wins() {
        let root = tempfile::tempdir().expect("temp dir");
        let sources = dirs(root.path());
        let order = ["cwd", "xdg/agentdeck", "etc", "bin"];
        for place in order.iter().rev() {
            std::fs::write(root.path().join(place).join("a.yaml"), "{}").expect("write");
            let found = sources.find("a.yaml").expect("found");
            assert_eq!(found, Some(root.path().join(place).join("a.yaml")));
        }
    }

    #[test]
    fn a_directory_with_the_file_name_is_skipped() {
        let root = tempfile::tempdir().expect("temp dir");
        let sources = dirs(root.path());
        std::fs::create_dir(root.path().join("cwd/a.yaml")).expect("mkdir");
        let file = root.path().join("etc/a.yaml");
        std::fs::write(&file, "{}").expect("write");
        assert_eq!(sources.find("a.yaml").expect("found"), Some(file));
    }

    #[test]
    fn no_file_anywhere_finds_nothing() {
        let root = tempfile::tempdir().expect("temp dir");
        assert_eq!(dirs(root.path()).find("a.yaml").expect("no error"), None);
    }

    #[test]
    fn the_explicit_file_wins_over_every_location() {
        let root = tempfile::tempdir().expect("temp dir");
        let found = dirs(root.path());
        let explicit = root.path().join("mine.yaml");
        std::fs::write(&explicit, "{}").expect("write");
        std::fs::write(root.path().join("cwd/a.yaml"), "{}").expect("write");
        let sources = ConfigSources {
            explicit: Some(explicit.clone()),
            ..found
        };
        assert_eq!(sources.find("a.yaml").expect("found"), Some(explicit));
    }

    #[test]
    fn a_missing_explicit_file_is_an_error_even_when_others_exist() {
        let root = tempfile::tempdir().expect("temp dir");
        let found = dirs(root.path());
        std::fs::write(root.path().join("cwd/a.yaml"), "{}").expect("write");
        let missing = root.path().join("missing.yaml");
        let sources = ConfigSources {
            explicit: Some(missing.clone()),
            ..found
        };
        let err = sources.find("a.yaml").expect_err("missing");
        assert!(matches!(&err, ConfigError::ExplicitFileMissing { path } if *path == missing));
        assert!(err.is_user_error());
        assert!(err.to_string().contains("missing.yaml"), "{err}");
    }

    #[test]
    fn an_explicit_directory_is_a_usage_error_naming_it() {
        let root = tempfile::tempdir().expect("temp dir");
        let sources = ConfigSources {
            explicit: Some(root.path().to_owned()),
            ..ConfigSources::none()
        };
        let err = sources.find("a.yaml").expect_err("a directory");
        assert!(matches!(err, ConfigError::ExplicitNotAFile { .. }), "{err}");
        assert!(err.is_user_error());
        assert!(err.to_string().contains("not a file"), "{err}");
    }

    #[test]
    fn only_prefixed_variables_are_taken_from_the_process_environment() {
        let vars = [
            ("AGENTDECK_THEME", "light"),
            ("HOME", "/root"),
            ("AGENTDECK_AGENT_CONCURRENCY", "2"),
            ("XAGENTDECK_THEME", "x"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        assert_eq!(
            config_env(vars.into_iter()),
            vec![
                ("AGENTDECK_THEME".to_owned(), "light".to_owned()),
                ("AGENTDECK_AGENT_CONCURRENCY".to_owned(), "2".to_owned()),
            ]
        );
    }
}
