//! RESTART_DOC
use super::Driver;

impl Driver {
    pub(super) fn restart(&mut self, _how: u8) {}
}
