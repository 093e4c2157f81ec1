//! Rewriting a core module so that the kernel can put an instance of it back into its fresh
//! state in place (per-request isolation: [`Isolation`](crate::kernel::Isolation) and
//! [`Domain::reset`](crate::Domain::reset)).
//!
//! wasmtime reads and writes only *exported* globals and tables, and keeps no API to undo a
//! `data.drop` or an `elem.drop`. So before it compiles an isolated domain's module the
//! kernel rewrites it:
//!
//! * every mutable global and every table the module defines is exported under a reserved
//!   name (`lrpc:reset/global/N`, `lrpc:reset/table/N`, `N` its index), the shadow stack
//!   pointer included;
//! * a passive data or element segment that some `data.drop` / `elem.drop` drops gets a
//!   mutable `i32` flag global (exported like the others). The drop becomes a call to a small
//!   function that sets the flag, and every `memory.init` / `table.init` of that segment a
//!   call to one that traps as a dropped segment would (any non-empty range of a dropped
//!   segment is out of bounds) and otherwise runs the real instruction. The segment itself
//!   is never dropped, so restoring the flag restores it.
//!
//! * the guest's memory size is kept in a global of its own (exported as `lrpc:reset/size`
//!   too): `memory.size` reads it and `memory.grow` goes through a function that grows the
//!   real memory only past the pages it already has. wasmtime can not shrink a memory, so
//!   after a reset the pages a request grew stay, zeroed, above the size the guest sees,
//!   and the next `memory.grow` hands them out again. The kernel raises the global when it
//!   grows the memory itself for windows.
//!
//! The one difference from a fresh instance that remains: a load or store just past the
//! size the guest sees, into pages an earlier request grew, reads zeros or writes where no
//! other request will look, instead of trapping.
//!
//! What it refuses: modules that import a memory, a table or a mutable global (state the
//! domain does not own), modules with more than one memory, a 64-bit or shared memory, and
//! names under the reserved prefix. The original bytes are validated first, so the rewrite never makes an invalid
//! module valid, and nothing here panics on hostile bytes.

use std::collections::{BTreeMap, BTreeSet};
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
    GlobalType, Instruction, TypeSection, ValType,
};
use wasmparser::{DataKind, ElementKind, Operator, Parser, Payload, TypeRef};

/// The prefix of the exports the rewrite adds.
pub(crate) const RESERVED: &str = "lrpc:reset/";

/// The export name of global `index`.
pub(crate) fn global_export(index: u32) -> String {
    format!("{RESERVED}global/{index}")
}

/// The export name of the global holding the memory size the guest sees, in wasm pages.
pub(crate) const SIZE_EXPORT: &str = "lrpc:reset/size";

/// The export name of table `index`.
pub(crate) fn table_export(index: u32) -> String {
    format!("{RESERVED}table/{index}")
}

/// A rewritten module: its bytes and the names of the state it exports for resets.
#[derive(Debug)]
pub(crate) struct Rewritten {
    pub wasm: Vec<u8>,
    /// Exports of every mutable global the module defines and writes (drop flags and the
    /// size included).
    pub globals: Vec<String>,
    /// Exports of every table the module defines and writes.
    pub tables: Vec<String>,
}

/// What a first pass over the module found.
#[derive(Default)]
struct Scan {
    types: u32,
    imported_funcs: u32,
    defined_funcs: u32,
    imported_globals: u32,
    defined_globals: u32,
    /// Mutability of each defined global, in order.
    global_mutable: Vec<bool>,
    imported_tables: u32,
    defined_tables: u32,
    memories: u32,
    /// Initial pages of the one memory.
    memory_pages: u64,
    has_export_section: bool,
    passive_data: BTreeSet<u32>,
    passive_elems: BTreeSet<u32>,
    dropped_data: BTreeSet<u32>,
    dropped_elems: BTreeSet<u32>,
    /// `(data, memory)` of every `memory.init` of a dropped segment.
    data_inits: BTreeSet<(u32, u32)>,
    /// `(elem, table)` of every `table.init` of a dropped segment.
    elem_inits: BTreeSet<(u32, u32)>,
    /// Every global some `global.set` writes.
    set_globals: BTreeSet<u32>,
    /// Every table some instruction writes (`table.set`, `.grow`, `.fill`, `.copy`, `.init`).
    written_tables: BTreeSet<u32>,
}

/// Rewrites `wasm` (binary or text) for in-place resets; `Err` says why it can not be.
pub(crate) fn rewrite(wasm: &[u8]) -> Result<Rewritten, String> {
    let binary;
    let wasm = if wasm.starts_with(b"\0asm") {
        wasm
    } else {
        binary = wat::parse_bytes(wasm).map_err(|e| e.to_string())?;
        &binary[..]
    };
    wasmparser::Validator::new()
        .validate_all(wasm)
        .map_err(|e| format!("invalid module: {e}"))?;
    let scan = scan(wasm)?;
    let mut plan = Plan::new(&scan);
    let mut module = wasm_encoder::Module::new();
    plan.parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| format!("rewriting the module failed: {e}"))?;
    // Only guest code writes an isolated domain's globals and tables (the kernel never
    // does, and imports of mutable ones are refused), so those no instruction writes keep
    // their first values and need no saving.
    let globals = (0..scan.defined_globals)
        .filter(|&i| scan.global_mutable.get(i as usize) == Some(&true))
        .map(|i| scan.imported_globals + i)
        .filter(|i| scan.set_globals.contains(i))
        .chain(plan.added_globals())
        .map(global_export)
        .collect();
    let tables = (0..scan.defined_tables)
        .map(|i| scan.imported_tables + i)
        .filter(|i| scan.written_tables.contains(i))
        .map(table_export)
        .collect();
    Ok(Rewritten {
        wasm: module.finish(),
        globals,
        tables,
    })
}

fn scan(wasm: &[u8]) -> Result<Scan, String> {
    let mut s = Scan::default();
    let err = |e: wasmparser::BinaryReaderError| e.to_string();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(err)? {
            Payload::TypeSection(r) => {
                for group in r {
                    let n = group.map_err(err)?.types().len();
                    s.types = s.types.saturating_add(n as u32);
                }
            }
            Payload::ImportSection(r) => {
                for import in r.into_imports() {
                    let import = import.map_err(err)?;
                    match import.ty {
                        TypeRef::Func(_) | TypeRef::FuncExact(_) => s.imported_funcs += 1,
                        TypeRef::Global(g) if !g.mutable => s.imported_globals += 1,
                        TypeRef::Tag(_) => {}
                        _ => {
                            return Err(format!(
                                "it imports `{}::{}`, state it does not own (only functions, \
                                 tags and immutable globals may be imported)",
                                import.module, import.name
                            ));
                        }
                    }
                }
            }
            Payload::FunctionSection(r) => s.defined_funcs = r.count(),
            Payload::TableSection(r) => s.defined_tables = r.count(),
            Payload::MemorySection(r) => {
                s.memories = r.count();
                for m in r {
                    let m = m.map_err(err)?;
                    if m.memory64 || m.shared {
                        return Err("its memory is 64-bit or shared".into());
                    }
                    s.memory_pages = m.initial;
                }
            }
            Payload::GlobalSection(r) => {
                for g in r {
                    s.global_mutable.push(g.map_err(err)?.ty.mutable);
                }
                s.defined_globals = s.global_mutable.len() as u32;
            }
            Payload::ExportSection(r) => {
                s.has_export_section = true;
                for e in r {
                    if e.map_err(err)?.name.starts_with(RESERVED) {
                        return Err(format!("an export name starts with `{RESERVED}`"));
                    }
                }
            }
            Payload::ElementSection(r) => {
                for (i, e) in r.into_iter().enumerate() {
                    if matches!(e.map_err(err)?.kind, ElementKind::Passive) {
                        s.passive_elems.insert(i as u32);
                    }
                }
            }
            Payload::DataSection(r) => {
                for (i, d) in r.into_iter().enumerate() {
                    if matches!(d.map_err(err)?.kind, DataKind::Passive) {
                        s.passive_data.insert(i as u32);
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader().map_err(err)?;
                while !ops.eof() {
                    match ops.read().map_err(err)? {
                        Operator::DataDrop { data_index } => {
                            s.dropped_data.insert(data_index);
                        }
                        Operator::ElemDrop { elem_index } => {
                            s.dropped_elems.insert(elem_index);
                        }
                        Operator::MemoryInit { data_index, mem } => {
                            s.data_inits.insert((data_index, mem));
                        }
                        Operator::TableInit { elem_index, table } => {
                            s.elem_inits.insert((elem_index, table));
                            s.written_tables.insert(table);
                        }
                        Operator::GlobalSet { global_index } => {
                            s.set_globals.insert(global_index);
                        }
                        Operator::TableSet { table }
                        | Operator::TableGrow { table }
                        | Operator::TableFill { table } => {
                            s.written_tables.insert(table);
                        }
                        Operator::TableCopy { dst_table, .. } => {
                            s.written_tables.insert(dst_table);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if s.memories != 1 {
        return Err(format!(
            "it defines {} memories (an isolated domain has exactly one)",
            s.memories
        ));
    }
    s.dropped_data.retain(|d| s.passive_data.contains(d));
    s.dropped_elems.retain(|e| s.passive_elems.contains(e));
    let (data, elems) = (&s.dropped_data, &s.dropped_elems);
    let data_inits = s.data_inits.iter().filter(|(d, _)| data.contains(d));
    let elem_inits = s.elem_inits.iter().filter(|(e, _)| elems.contains(e));
    let (data_inits, elem_inits): (BTreeSet<_>, BTreeSet<_>) =
        (data_inits.copied().collect(), elem_inits.copied().collect());
    s.data_inits = data_inits;
    s.elem_inits = elem_inits;
    Ok(s)
}

/// A tracked segment: its flag global and the functions that stand in for its instructions.
#[derive(Clone, Copy)]
struct Tracked {
    flag: u32,
    drop_func: u32,
}

/// The rewrite: the scan's counts, and the indices of everything it adds.
struct Plan {
    /// The global holding the size the guest sees, its initial value, and the functions
    /// standing in for `memory.size` and `memory.grow`.
    size_global: u32,
    memory_pages: u64,
    size_func: u32,
    grow_func: u32,
    data: BTreeMap<u32, Tracked>,
    elems: BTreeMap<u32, Tracked>,
    /// `(segment, memory or table)` to the function standing in for the init.
    data_init_funcs: BTreeMap<(u32, u32), u32>,
    elem_init_funcs: BTreeMap<(u32, u32), u32>,
    /// New globals, new functions (with their bodies), new exports.
    flags: u32,
    funcs: Vec<(u32, Function)>,
    exports: Vec<(String, ExportKind, u32)>,
    globals_emitted: bool,
    has_export_section: bool,
}

impl Plan {
    fn new(s: &Scan) -> Plan {
        let first_global = s.imported_globals + s.defined_globals;
        let first_func = s.imported_funcs + s.defined_funcs;
        // The size global comes first, then the size and grow functions.
        let size_global = first_global;
        let mut next_global = first_global + 1;
        let (void_type, init_type, size_type, grow_type) =
            (s.types, s.types + 1, s.types + 2, s.types + 3);
        let mut funcs = vec![
            (size_type, size_body(size_global)),
            (grow_type, grow_body(size_global)),
        ];
        let (size_func, grow_func) = (first_func, first_func + 1);
        let mut next_func = first_func + 2;
        let mut track = |segs: &BTreeSet<u32>, funcs: &mut Vec<(u32, Function)>| {
            let mut out = BTreeMap::new();
            for &seg in segs {
                let flag = next_global;
                next_global += 1;
                let mut f = Function::new([]);
                f.instruction(&Instruction::I32Const(1));
                f.instruction(&Instruction::GlobalSet(flag));
                f.instruction(&Instruction::End);
                funcs.push((void_type, f));
                out.insert(
                    seg,
                    Tracked {
                        flag,
                        drop_func: next_func,
                    },
                );
                next_func += 1;
            }
            out
        };
        let data = track(&s.dropped_data, &mut funcs);
        let elems = track(&s.dropped_elems, &mut funcs);
        let mut init_funcs = |inits: &BTreeSet<(u32, u32)>,
                              tracked: &BTreeMap<u32, Tracked>,
                              funcs: &mut Vec<(u32, Function)>,
                              data: bool| {
            let mut out = BTreeMap::new();
            for &(seg, target) in inits {
                let Some(t) = tracked.get(&seg) else { continue };
                funcs.push((init_type, init_body(t.flag, seg, target, data)));
                out.insert((seg, target), next_func);
                next_func += 1;
            }
            out
        };
        let data_init_funcs = init_funcs(&s.data_inits, &data, &mut funcs, true);
        let elem_init_funcs = init_funcs(&s.elem_inits, &elems, &mut funcs, false);
        let flags = next_global - first_global - 1;
        let mut exports = Vec::new();
        for i in 0..s.defined_globals {
            if s.global_mutable.get(i as usize) == Some(&true) {
                let g = s.imported_globals + i;
                exports.push((global_export(g), ExportKind::Global, g));
            }
        }
        for g in first_global..next_global {
            exports.push((global_export(g), ExportKind::Global, g));
        }
        exports.push((SIZE_EXPORT.to_string(), ExportKind::Global, size_global));
        for i in 0..s.defined_tables {
            let t = s.imported_tables + i;
            exports.push((table_export(t), ExportKind::Table, t));
        }
        Plan {
            size_global,
            memory_pages: s.memory_pages,
            size_func,
            grow_func,
            data,
            elems,
            data_init_funcs,
            elem_init_funcs,
            flags,
            funcs,
            exports,
            globals_emitted: false,
            has_export_section: s.has_export_section,
        }
    }

    /// Indices of the globals the rewrite adds: the size, then the flags.
    fn added_globals(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .data
            .values()
            .chain(self.elems.values())
            .map(|t| t.flag)
            .collect();
        v.push(self.size_global);
        v.sort_unstable();
        v
    }

    fn add_globals(&mut self, globals: &mut GlobalSection) {
        let ty = GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        };
        // At most 65536 pages in a 32-bit memory: the initial size fits.
        let pages = i32::try_from(self.memory_pages).unwrap_or(i32::MAX);
        globals.global(ty, &ConstExpr::i32_const(pages));
        for _ in 0..self.flags {
            let ty = GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            };
            globals.global(ty, &ConstExpr::i32_const(0));
        }
        self.globals_emitted = true;
    }

    fn add_exports(&self, exports: &mut ExportSection) {
        for (name, kind, index) in &self.exports {
            exports.export(name, *kind, *index);
        }
    }
}

/// The body of a function standing in for `memory.init seg target` (`data`) or `table.init
/// seg target`: `(dst, src, len)`, trapping as the instruction does on a dropped segment.
fn init_body(flag: u32, seg: u32, target: u32, data: bool) -> Function {
    let mut f = Function::new([]);
    for i in [
        Instruction::GlobalGet(flag),
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::LocalGet(1),
        Instruction::LocalGet(2),
        Instruction::I32Or,
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::Unreachable,
        Instruction::End,
        Instruction::End,
        Instruction::LocalGet(0),
        Instruction::LocalGet(1),
        Instruction::LocalGet(2),
    ] {
        f.instruction(&i);
    }
    f.instruction(&if data {
        Instruction::MemoryInit {
            mem: target,
            data_index: seg,
        }
    } else {
        Instruction::TableInit {
            elem_index: seg,
            table: target,
        }
    });
    f.instruction(&Instruction::End);
    f
}

/// `memory.size`: the size the guest sees.
fn size_body(size: u32) -> Function {
    let mut f = Function::new([]);
    f.instruction(&Instruction::GlobalGet(size));
    f.instruction(&Instruction::End);
    f
}

/// `memory.grow` by `delta` (local 0): pages the memory already has past the size the guest
/// sees are handed out first; the real memory grows by the rest. Returns the old size, or
/// -1 as `memory.grow` does.
fn grow_body(size: u32) -> Function {
    use wasm_encoder::BlockType::Result as R;
    let mut f = Function::new([(1, ValType::I32)]);
    let old = 1;
    let slack = [
        Instruction::MemorySize(0),
        Instruction::GlobalGet(size),
        Instruction::I32Sub,
    ];
    let mut body = vec![
        Instruction::GlobalGet(size),
        Instruction::LocalSet(old),
        Instruction::LocalGet(0),
    ];
    body.extend(slack.iter().cloned());
    body.extend([
        Instruction::I32LeU,
        Instruction::If(R(ValType::I32)),
        Instruction::GlobalGet(size),
        Instruction::LocalGet(0),
        Instruction::I32Add,
        Instruction::GlobalSet(size),
        Instruction::LocalGet(old),
        Instruction::Else,
        Instruction::LocalGet(0),
    ]);
    body.extend(slack.iter().cloned());
    body.extend([
        Instruction::I32Sub,
        Instruction::MemoryGrow(0),
        Instruction::I32Const(-1),
        Instruction::I32Eq,
        Instruction::If(R(ValType::I32)),
        Instruction::I32Const(-1),
        Instruction::Else,
        Instruction::MemorySize(0),
        Instruction::GlobalSet(size),
        Instruction::LocalGet(old),
        Instruction::End,
        Instruction::End,
        Instruction::End,
    ]);
    for i in &body {
        f.instruction(i);
    }
    f
}

/// Position of a section in a module's order (custom sections aside).
fn order(id: wasm_encoder::SectionId) -> u8 {
    use wasm_encoder::SectionId as S;
    match id {
        S::Type => 1,
        S::Import => 2,
        S::Function => 3,
        S::Table => 4,
        S::Memory => 5,
        S::Tag => 6,
        S::Global => 7,
        S::Export => 8,
        S::Start => 9,
        S::Element => 10,
        S::DataCount => 11,
        S::Code => 12,
        S::Data => 13,
        _ => 0,
    }
}

type ReError = reencode::Error<std::convert::Infallible>;

impl Reencode for Plan {
    type Error = std::convert::Infallible;

    fn instruction<'a>(&mut self, op: Operator<'a>) -> Result<Instruction<'a>, ReError> {
        let call = match op {
            Operator::MemorySize { mem: 0 } => Some(self.size_func),
            Operator::MemoryGrow { mem: 0 } => Some(self.grow_func),
            Operator::DataDrop { data_index } => self.data.get(&data_index).map(|t| t.drop_func),
            Operator::ElemDrop { elem_index } => self.elems.get(&elem_index).map(|t| t.drop_func),
            Operator::MemoryInit { data_index, mem } => {
                self.data_init_funcs.get(&(data_index, mem)).copied()
            }
            Operator::TableInit { elem_index, table } => {
                self.elem_init_funcs.get(&(elem_index, table)).copied()
            }
            _ => None,
        };
        match call {
            Some(f) => Ok(Instruction::Call(f)),
            None => reencode::utils::instruction(self, op),
        }
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), ReError> {
        reencode::utils::parse_type_section(self, types, section)?;
        types.ty().function([], []);
        types.ty().function([ValType::I32; 3], []);
        types.ty().function([], [ValType::I32]);
        types.ty().function([ValType::I32], [ValType::I32]);
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), ReError> {
        reencode::utils::parse_function_section(self, functions, section)?;
        for (ty, _) in &self.funcs {
            functions.function(*ty);
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), ReError> {
        reencode::utils::parse_code_section(self, code, section)?;
        for (_, f) in &self.funcs {
            code.function(f);
        }
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), ReError> {
        reencode::utils::parse_global_section(self, globals, section)?;
        self.add_globals(globals);
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), ReError> {
        reencode::utils::parse_export_section(self, exports, section)?;
        self.add_exports(exports);
        Ok(())
    }

    fn intersperse_section_hook(
        &mut self,
        module: &mut wasm_encoder::Module,
        after: Option<wasm_encoder::SectionId>,
        before: Option<wasm_encoder::SectionId>,
    ) -> Result<(), ReError> {
        use wasm_encoder::SectionId as S;
        let after = after.map_or(0, order);
        let before = before.map_or(u8::MAX, order);
        // A module without a global section (or an export section) gets one where it goes.
        if !self.globals_emitted && after < order(S::Global) && before > order(S::Global) {
            let mut globals = GlobalSection::new();
            self.add_globals(&mut globals);
            module.section(&globals);
        }
        if !self.has_export_section && after < order(S::Export) && before > order(S::Export) {
            let mut exports = ExportSection::new();
            self.add_exports(&mut exports);
            module.section(&exports);
            self.has_export_section = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rewrite_round_trips_a_module_without_segments() {
        let r = rewrite(
            br#"(module (memory (export "memory") 1)
                (global $sp (mut i32) (i32.const 1024))
                (global i32 (i32.const 7))
                (table 2 funcref))"#,
        )
        .unwrap();
        // Nothing writes the global or the table: only the size needs saving.
        assert_eq!(r.globals, ["lrpc:reset/global/2"]);
        assert!(r.tables.is_empty());
        wasmparser::Validator::new().validate_all(&r.wasm).unwrap();
        let r = rewrite(
            br#"(module (memory (export "memory") 1)
                (global $sp (mut i32) (i32.const 1024))
                (global i32 (i32.const 7))
                (table $a 2 funcref) (table $b 2 funcref)
                (func (global.set $sp (i32.const 8))
                  (table.copy $b $a (i32.const 0) (i32.const 0) (i32.const 1))))"#,
        )
        .unwrap();
        assert_eq!(r.globals, ["lrpc:reset/global/0", "lrpc:reset/global/2"]);
        assert_eq!(r.tables, ["lrpc:reset/table/1"], "the table copied into");
        wasmparser::Validator::new().validate_all(&r.wasm).unwrap();
    }

    #[test]
    fn imported_state_and_reserved_names_are_refused() {
        for bad in [
            &br#"(module (import "a" "m" (memory 1)))"#[..],
            br#"(module (import "a" "g" (global (mut i32))) (memory (export "memory") 1))"#,
            br#"(module (memory (export "memory") 1) (func (export "lrpc:reset/x")))"#,
            br#"(module)"#,
            b"\0asm\x01\0\0\0\x05",
        ] {
            assert!(rewrite(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn drops_become_calls_and_get_flags() {
        let r = rewrite(
            br#"(module (memory (export "memory") 1)
                (data $d "abc")
                (func (export "f") (memory.init $d (i32.const 0) (i32.const 0) (i32.const 3))
                    (data.drop $d)))"#,
        )
        .unwrap();
        assert_eq!(r.globals, ["lrpc:reset/global/0", "lrpc:reset/global/1"]);
        wasmparser::Validator::new().validate_all(&r.wasm).unwrap();
    }
}
