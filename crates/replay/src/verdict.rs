//! What `bbv trace` and `bbv checkpoint` say once their replay ended, and how they exit.

use crate::{ReplayError, ReplayOutcome};

impl ReplayOutcome {
    /// What `bbv trace` and `bbv checkpoint` say after the replay's table, and their exit
    /// status: 0 when every marker was reached and every trace or checkpoint made, 1 when a
    /// marker was missed or a region could not be traced whole (`passed`: the table's
    /// verdict); an error that is bad input is returned as such.
    pub fn verdict(self, passed: bool) -> Result<(String, u8), ReplayError> {
        let code = u8::from(!passed);
        if let Some(t) = self.traces {
            return match t {
                Ok(t) => Ok((t.text(), code)),
                Err(e @ ReplayError::NotTraced(_)) => Ok((format!("bbv: {e}\n"), 1)),
                Err(e) => Err(e),
            };
        }
        match self.checkpoints {
            Some(c) => Ok((c?.text(), code)),
            None if self.checkpoints_asked => Ok((
                "bbv: no checkpoints written: a marker was missed\n".into(),
                1,
            )),
            None => Ok((String::new(), code)),
        }
    }
}
