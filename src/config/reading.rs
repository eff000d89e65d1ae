//! Reading a file: from its text to a `Reading` (the config and every
//! located problem), and to a `Loaded` config when nothing is an error.
//! It reads the YAML only; the files a config names are loaded by the
//! policy builder (`crate::build`).

use std::path::Path;

use super::error::Problems;
use super::model::Config;
use super::yaml::{self, Reader};

/// The text a policy was read from, as `GET /v1/policy` shows it: a
/// file's own, or the controller's base file with the cluster's part,
/// which is written out only when asked for (a build has no text).
pub struct Source {
    text: std::sync::OnceLock<String>,
    make: Option<Box<dyn Fn() -> String + Send + Sync>>,
}

impl Source {
    pub fn made(make: impl Fn() -> String + Send + Sync + 'static) -> Source {
        Source {
            text: std::sync::OnceLock::new(),
            make: Some(Box::new(make)),
        }
    }

    pub fn text(&self) -> &str {
        self.text
            .get_or_init(|| self.make.as_ref().map(|m| m()).unwrap_or_default())
    }
}

impl From<String> for Source {
    fn from(text: String) -> Source {
        Source {
            text: std::sync::OnceLock::from(text),
            make: None,
        }
    }
}

/// A file read without errors: the config, plus warnings worth printing.
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
    /// The text it was read from (`GET /v1/policy` shows it).
    pub text: Source,
}

/// What the reader made of a file: the config (none when the text is not a
/// YAML mapping), every problem found (errors and warnings), and the text.
/// The policy builder loads what the config names and adds its own.
pub struct Reading {
    pub config: Option<Config>,
    pub problems: Problems,
    pub text: Source,
}

impl Reading {
    /// The config, unless some problem is an error.
    pub fn finish(self) -> Result<Loaded, Problems> {
        match self.config {
            Some(config) if !self.problems.has_errors() => Ok(Loaded {
                config,
                warnings: self.problems.render_warnings(),
                text: self.text,
            }),
            _ => Err(self.problems),
        }
    }
}

impl Config {
    /// Reads a file: its shape, references and the paths it names (which
    /// must exist), not the files themselves.
    pub fn read(path: &Path) -> Reading {
        let shown = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Self::read_text(&shown, &text, path.parent().unwrap_or(Path::new("."))),
            Err(e) => {
                let mut problems = Problems::new(shown);
                problems.push(
                    (1, 1),
                    "config.unreadable",
                    format!("cannot read file: {e}"),
                );
                Reading {
                    config: None,
                    problems,
                    text: String::new().into(),
                }
            }
        }
    }

    /// Reads YAML text; relative file paths resolve against `base`.
    pub fn read_text(file: &str, text: &str, base: &Path) -> Reading {
        let mut problems = Problems::new(file);
        match yaml::parse(text, &mut problems) {
            Some(root) => Self::read_tree(problems, &root, text.to_string().into(), base),
            None => Reading {
                config: None,
                problems,
                text: text.to_string().into(),
            },
        }
    }

    /// Reads the controller's base file: its config, and the tree the
    /// cluster's part is merged into.
    pub fn read_base(
        file: &str,
        text: &str,
        base: &Path,
    ) -> Result<(Loaded, marked_yaml::Node), Problems> {
        let mut problems = Problems::new(file);
        let Some(root) = yaml::parse(text, &mut problems) else {
            return Err(problems);
        };
        let loaded = Self::read_tree(problems, &root, text.to_string().into(), base).finish()?;
        Ok((loaded, root))
    }

    /// Reads a YAML tree parsed already (the controller's: the base file
    /// with the cluster's objects merged in); `text` is what `GET
    /// /v1/policy` shows of it.
    pub fn read_node(file: &str, root: &marked_yaml::Node, text: Source, base: &Path) -> Reading {
        Self::read_tree(Problems::new(file), root, text, base)
    }

    fn read_tree(
        mut problems: Problems,
        root: &marked_yaml::Node,
        text: Source,
        base: &Path,
    ) -> Reading {
        let config = super::read::build(
            root,
            base,
            &mut Reader {
                problems: &mut problems,
            },
        );
        Reading {
            config,
            problems,
            text,
        }
    }

    /// Reads YAML text into a config, if it has no errors; the files it
    /// names are not loaded (`crate::build::from_text` loads them too).
    pub fn from_text(file: &str, text: &str, base: &Path) -> Result<Loaded, Problems> {
        Self::read_text(file, text, base).finish()
    }
}
