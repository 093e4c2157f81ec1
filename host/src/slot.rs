//! Handle tables: a replica's synchronous bindings and its channels are each a table of
//! [`Slot`]s, indexed by the slot number of the handle the guest holds. A slot's
//! generation grows each time it is issued again, so an old handle to a reused slot is told
//! apart (stale) from one that was never issued (forged).

/// One entry of a handle table.
pub(crate) struct Slot<T> {
    /// Generation of the handle issued for this slot most recently (0: never issued).
    pub generation: u32,
    /// What the handle names, while it is live.
    pub live: Option<T>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            generation: 0,
            live: None,
        }
    }
}

/// Why a handle names nothing live in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// It was issued once; its slot was freed (and maybe issued again) since.
    Stale,
    /// No handle of this slot and generation was ever issued.
    Forged,
}

/// A free slot of `table` and the generation its next handle gets: the first slot not in
/// use whose generation can still grow, else a new slot at the end.
pub(crate) fn vacancy<T>(table: &[Slot<T>]) -> (usize, u32) {
    let slot = table
        .iter()
        .position(|s| s.live.is_none() && s.generation < u32::MAX)
        .unwrap_or(table.len());
    let generation = table.get(slot).map_or(0, |s| s.generation) + 1;
    (slot, generation)
}

/// Puts `value` in `slot` (found by [`vacancy`]) under `generation`.
pub(crate) fn fill<T>(table: &mut Vec<Slot<T>>, slot: usize, generation: u32, value: T) {
    if slot == table.len() {
        table.push(Slot::default());
    }
    table[slot] = Slot {
        generation,
        live: Some(value),
    };
}

/// The live entry of `table` that `(slot, generation)` names, or why there is none.
pub(crate) fn find<T>(table: &[Slot<T>], slot: usize, generation: u32) -> Result<&T, Miss> {
    match table.get(slot) {
        Some(Slot {
            generation: g,
            live: Some(v),
        }) if *g == generation => Ok(v),
        Some(s) if generation != 0 && generation <= s.generation => Err(Miss::Stale),
        _ => Err(Miss::Forged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_slots_tell_stale_handles_from_forged_ones() {
        let mut t: Vec<Slot<&str>> = Vec::new();
        let (s, g) = vacancy(&t);
        assert_eq!((s, g), (0, 1));
        fill(&mut t, s, g, "a");
        assert_eq!(find(&t, 0, 1), Ok(&"a"));
        assert_eq!(find(&t, 0, 2), Err(Miss::Forged));
        assert_eq!(find(&t, 1, 1), Err(Miss::Forged));
        t[0].live = None;
        assert_eq!(find(&t, 0, 1), Err(Miss::Stale));
        let (s, g) = vacancy(&t);
        assert_eq!((s, g), (0, 2));
        fill(&mut t, s, g, "b");
        assert_eq!(find(&t, 0, 1), Err(Miss::Stale));
        assert_eq!(find(&t, 0, 2), Ok(&"b"));
        assert_eq!(find(&t, 0, 0), Err(Miss::Forged));
    }

    #[test]
    fn a_slot_whose_generation_is_spent_is_not_reused() {
        let mut t: Vec<Slot<u8>> = vec![Slot {
            generation: u32::MAX,
            live: None,
        }];
        assert_eq!(vacancy(&t), (1, 1));
        fill(&mut t, 1, 1, 9);
        assert_eq!(find(&t, 1, 1), Ok(&9));
    }
}
