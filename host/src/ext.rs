//! Feature tables: state that a feature keeps on a record (a replica's store data, the
//! kernel) without the record naming the feature's type.
//!
//! A record holds one [`Extensions`]; each feature keeps one value of a type of its own in
//! it, found by that type. So adding a feature adds a type in the feature's module, not a
//! field to every record it touches. Lookups compare a few type ids (a record holds a
//! handful of tables), so they are for the paths that open channels and MultiRPCs, not for
//! the synchronous call path, whose binding table is a field of its own.

use std::any::{Any, TypeId};

/// One value per type, each a feature's table.
#[derive(Default)]
pub(crate) struct Extensions {
    items: Vec<(TypeId, Box<dyn Any + Send>)>,
}

impl Extensions {
    /// The table of type `T`, if the feature made one.
    pub(crate) fn get<T: Any + Send>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        let (_, v) = self.items.iter().find(|(t, _)| *t == id)?;
        v.downcast_ref()
    }

    /// The table of type `T`, made empty on first use.
    pub(crate) fn get_or_default<T: Any + Send + Default>(&mut self) -> &mut T {
        let id = TypeId::of::<T>();
        let at = match self.items.iter().position(|(t, _)| *t == id) {
            Some(i) => i,
            None => {
                self.items.push((id, Box::new(T::default())));
                self.items.len() - 1
            }
        };
        self.items[at]
            .1
            .downcast_mut()
            .expect("the entry of T's type id holds a T")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Debug, PartialEq)]
    struct A(u32);
    #[derive(Default, Debug, PartialEq)]
    struct B(String);

    #[test]
    fn each_type_has_its_own_table() {
        let mut x = Extensions::default();
        assert!(x.get::<A>().is_none());
        x.get_or_default::<A>().0 = 7;
        x.get_or_default::<B>().0.push('b');
        assert_eq!(x.get::<A>(), Some(&A(7)));
        assert_eq!(x.get::<B>().map(|b| b.0.as_str()), Some("b"));
        x.get_or_default::<A>().0 += 1;
        assert_eq!(x.get::<A>(), Some(&A(8)));
    }
}
