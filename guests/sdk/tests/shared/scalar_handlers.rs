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
