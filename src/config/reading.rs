//! Reading a file: from its text to a `Reading` (the config and every
//! located problem), and to a `Loaded` config when nothing is an error.
//! It reads the YAML only; the files a config names are loaded by the
//! policy builder (`crate::build`).

use std::path::Path;

use super::error::Problems;
use super::model::Config;
use super::yaml::{self, Reader};

/// A file read without errors: the config, plus warnings worth printing.
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
    /// The text it was read from (`GET /v1/policy` shows it).
    pub text: String,
}

/// What the reader made of a file: the config (none when the text is not a
/// YAML mapping), every problem found (errors and warnings), and the text.
/// The policy builder loads what the config names and adds its own.
pub struct Reading {
    pub config: Option<Config>,
    pub problems: Problems,
    pub text: String,
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
                    text: String::new(),
                }
            }
        }
    }

    /// Reads YAML text; relative file paths resolve against `base`.
    pub fn read_text(file: &str, text: &str, base: &Path) -> Reading {
        let mut problems = Problems::new(file);
        match yaml::parse(text, &mut problems) {
            Some(root) => Self::read_tree(problems, &root, text, base),
            None => Reading {
                config: None,
                problems,
                text: text.to_string(),
            },
        }
    }

    /// Reads a YAML tree parsed already (the controller's: the base file
    /// with the cluster's objects merged in); `text` is what `GET
    /// /v1/policy` shows of it.
    pub fn read_node(file: &str, root: &marked_yaml::Node, text: &str, base: &Path) -> Reading {
        Self::read_tree(Problems::new(file), root, text, base)
    }

    fn read_tree(
        mut problems: Problems,
        root: &marked_yaml::Node,
        text: &str,
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
            text: text.to_string(),
        }
    }

    /// Reads YAML text into a config, if it has no errors; the files it
    /// names are not loaded (`crate::build::from_text` loads them too).
    pub fn from_text(file: &str, text: &str, base: &Path) -> Result<Loaded, Problems> {
        Self::read_text(file, text, base).finish()
    }
}
