/// The handlers of `lrpc:kitchen/sink` that take and return scalars only: the same under
/// owned and borrowed types (expanded inside both kitchen tests' `impl sink::Server`).
macro_rules! scalar_handlers {
    () => {
        #[allow(
            clippy::too_many_arguments,
            reason = "the WIT function has twelve parameters"
        )]
        fn scalars(
            &self,
            a: bool,
            _b: u8,
            c: i8,
            _d: u16,
            e: i16,
            _f: u32,
            g: i32,
            _h: u64,
            i: i64,
            j: f32,
            k: f64,
            l: char,
        ) -> (bool, i8, i16, i32, i64, f32, f64, char) {
            (a, c, e, g, i, j, k, l)
        }

        #[allow(
            clippy::too_many_arguments,
            reason = "the WIT function has seven parameters"
        )]
        fn bounded(
            &self,
            _p: Point,
            c: Color,
            _s: Small,
            _w: Wide,
            _h: Huge,
            _o: Option<u16>,
            r: Result<u8, i8>,
        ) -> Result<(), Color> {
            r.map(|_| ()).map_err(|_| c)
        }
    };
}

/// The handlers of `lrpc:versioned/shapes` that take and return scalars only (expanded inside
/// both kitchen tests' `impl shapes::Server`).
macro_rules! versioned_scalar_handlers {
    () => {
        #[allow(
            clippy::too_many_arguments,
            reason = "the WIT function has twenty parameters"
        )]
        fn twenty(
            &self,
            a0: u8,
            _a1: i8,
            _a2: u16,
            _a3: i16,
            _a4: u32,
            _a5: i32,
            a6: u64,
            _a7: i64,
            _a8: f32,
            _a9: f64,
            _a10: bool,
            _a11: u32,
            _a12: u32,
            _a13: u32,
            _a14: u32,
            _a15: u32,
            _a16: u32,
            _a17: u32,
            _a18: u32,
            a19: u32,
        ) -> u64 {
            u64::from(a0) + a6 + u64::from(a19)
        }

        fn flip(&self, w: shapes::Wide) -> shapes::Wide {
            shapes::Wide::from_bits(!w.bits() & shapes::Wide::all().bits()).unwrap_or_default()
        }
    };
}
