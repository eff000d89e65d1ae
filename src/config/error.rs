//! Located configuration problems: every problem in a file is collected and
//! reported at once as `FILE:LINE:COL: CODE: message`, the format `check`,
//! `serve` and reload all print. Nothing here decides what is valid.

use std::fmt;

use super::place::Place;

/// Whether a problem stops the file from loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem at one place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    /// A stable dotted code such as `limits.rate_invalid`.
    pub code: &'static str,
    /// Starts with the field path, e.g. `limits.api.default.rate "5/x": ...`.
    pub message: String,
    pub severity: Severity,
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, Default)]
pub struct Problems {
    pub file: String,
    pub list: Vec<Problem>,
}

impl Problems {
    pub fn new(file: impl Into<String>) -> Self {
        Problems {
            file: file.into(),
            list: Vec::new(),
        }
    }

    pub fn push(&mut self, at: (usize, usize), code: &'static str, message: impl Into<String>) {
        self.list.push(Problem {
            line: at.0,
            column: at.1,
            code,
            message: message.into(),
            severity: Severity::Error,
        });
    }

    pub fn warn(&mut self, at: (usize, usize), code: &'static str, message: impl Into<String>) {
        self.list.push(Problem {
            line: at.0,
            column: at.1,
            code,
            message: message.into(),
            severity: Severity::Warning,
        });
    }

    /// An error at a place the model kept (found after reading), shown
    /// as the reader shows its own: `FIELD: message`.
    pub fn push_at(&mut self, place: &Place, code: &'static str, message: impl fmt::Display) {
        let message = format!("{}: {message}", place.field);
        self.push((place.line, place.column), code, message);
    }

    /// A warning at a place the model kept.
    pub fn warn_at(&mut self, place: &Place, code: &'static str, message: impl fmt::Display) {
        let message = format!("{}: {message}", place.field);
        self.warn((place.line, place.column), code, message);
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|p| p.severity == Severity::Error)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.list.iter().filter(|p| p.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.list.iter().filter(|p| p.severity == Severity::Warning)
    }

    /// One line per problem, errors only, sorted by position.
    pub fn render_errors(&self) -> Vec<String> {
        self.render(Severity::Error)
    }

    pub fn render_warnings(&self) -> Vec<String> {
        self.render(Severity::Warning)
    }

    fn render(&self, severity: Severity) -> Vec<String> {
        let mut list: Vec<&Problem> = self
            .list
            .iter()
            .filter(|p| p.severity == severity)
            .collect();
        list.sort_by_key(|p| (p.line, p.column));
        list.iter().map(|p| self.line_for(p)).collect()
    }

    fn line_for(&self, p: &Problem) -> String {
        let suffix = match p.severity {
            Severity::Error => "",
            Severity::Warning => " (warning)",
        };
        format!(
            "{}:{}:{}: {}: {}{}",
            self.file, p.line, p.column, p.code, p.message, suffix
        )
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.render_errors() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}
