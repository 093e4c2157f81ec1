//! Store limits that also count the linear memory a Store's instances hold: the quota
//! module's `MeteredLimits`, which core domains use too.

pub use crate::quota::MeteredLimits;
