//! A process's line in `/proc/PID/stat`, read by its field numbers (proc(5)): the command name,
//! field 2, is in parentheses and may hold spaces or parentheses itself, so fields are counted
//! from after its last `)`.

/// The fields of `/proc/PID/stat` (`/proc/self/stat` for `None`), from field 3 (state) on.
pub struct ProcStat {
    after_name: Vec<String>,
}

impl ProcStat {
    /// Reads the line of process `pid` (this process for `None`); `None` where there is no such
    /// process or no `/proc`.
    pub fn read(pid: Option<u32>) -> Option<ProcStat> {
        let path = pid.map_or_else(|| "/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
        // (The command name may be any bytes, not UTF-8.)
        ProcStat::parse(&String::from_utf8_lossy(&std::fs::read(path).ok()?))
    }

    fn parse(line: &str) -> Option<ProcStat> {
        let after = line.rsplit_once(')')?.1;
        Some(ProcStat { after_name: after.split_whitespace().map(str::to_owned).collect() })
    }

    /// Field `n` as proc(5) numbers them (3 and up).
    pub fn field(&self, n: usize) -> Option<&str> {
        self.after_name.get(n.checked_sub(3)?).map(String::as_str)
    }

    /// Field `n` as a number.
    pub fn number(&self, n: usize) -> Option<u64> {
        self.field(n)?.parse().ok()
    }

    /// Whether the process still runs: not a zombie (`Z`) or dead (`X`).
    pub fn running(&self) -> bool {
        !matches!(self.field(3), Some("Z" | "X") | None)
    }
}

#[cfg(test)]
mod tests {
    use super::ProcStat;

    #[test]
    fn fields_count_from_after_the_last_parenthesis_of_the_name() {
        let s =
            ProcStat::parse("42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 5 0 12345 1000 10").unwrap();
        assert_eq!(s.field(3), Some("S"));
        assert_eq!((s.number(14), s.number(15)), (Some(7), Some(3)));
        assert_eq!(
            (s.number(20), s.number(22), s.number(23), s.number(24)),
            (Some(5), Some(12345), Some(1000), Some(10))
        );
        assert!(s.running());
        assert!(!ProcStat::parse("7 (z) Z 1").unwrap().running());
        assert_eq!(s.field(2), None);
        assert!(ProcStat::parse("no name").is_none());
    }

    #[test]
    fn this_process_is_running() {
        assert!(ProcStat::read(None).is_some_and(|s| s.running()));
    }
}
