//! `server.compression`: the codings, levels, types and memory bound the
//! reader builds and the proxy's encoder reads.

/// `server.compression`: which codings, in the gateway's order of
/// preference, at which levels, for which types and lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    pub codings: Vec<Coding>,
    pub gzip_level: u32,
    pub brotli_level: u32,
    pub zstd_level: u32,
    /// Answers whose `Content-Length` is below this pass as they are.
    pub min_length: u64,
    /// Media types compressed (lower case, no parameters); `*` any,
    /// `text/*` a whole top-level type.
    pub types: Vec<String>,
    /// Bytes of encoder state at once in this process; an answer that
    /// would go beyond passes uncompressed.
    pub max_memory: u64,
}

impl Compression {
    pub fn level(&self, coding: Coding) -> u32 {
        match coding {
            Coding::Gzip => self.gzip_level,
            Coding::Brotli => self.brotli_level,
            Coding::Zstd => self.zstd_level,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Brotli,
    Zstd,
}

impl Coding {
    /// What one encoder of it holds at `level`, rounded up: deflate's
    /// window and hash chains; brotli's ring buffer and match finder
    /// (lgwin 19); zstd's window (2 MiB) and tables.
    pub fn memory(self, level: u32) -> u64 {
        const MIB: u64 = 1 << 20;
        match (self, level) {
            (Coding::Gzip, _) => MIB / 4,
            (Coding::Brotli, 0..=4) => 2 * MIB,
            (Coding::Brotli, 5..=9) => 8 * MIB,
            (Coding::Brotli, _) => 24 * MIB,
            (Coding::Zstd, 0..=3) => 4 * MIB,
            (Coding::Zstd, _) => 12 * MIB,
        }
    }

    /// Its `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }
}
