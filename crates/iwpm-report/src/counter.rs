//! One way to declare counters, for the core's [`crate::Stats`] and the daemon's IO
//! counters (iwpm-control's `IoCounter`): each counter's name, kind, help text and where it
//! shows are written once, in one [`counters!`](crate::counters) list, and every export
//! (the SIGUSR1 dump, `iwpmctl status`, the metrics) reads them from there. Where a counter
//! shows ([`Surface`]) is said in that list, beside its name, and not in the core, which
//! only counts.

/// Whether a counter only grows or reflects the current state; the metrics render the
/// first as `_total` counters, the second as gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// Only grows (wrapping).
    Total,
    /// The current level (`mappings`, `ports_held`, ...).
    Gauge,
}

/// A place where the daemon publishes its counters. A counter leaves one out when another
/// name there already carries its figure (the metrics' `iwpmd_mappings` is the core's
/// `mappings`), so that each figure has one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Surface {
    /// The control socket's `status` reply (`iwpmctl status`, human and JSON).
    Status,
    /// The SIGUSR1 dump's counter lines (and the control socket's `dump`).
    Dump,
    /// The OpenMetrics text (`iwpmctl metrics`).
    Metrics,
}

/// Whether the daemon has a counter at all times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    /// Always printed.
    Always,
    /// Only while the daemon keeps ports across restarts (the systemd FD store, the state
    /// file), so a reader must not miss it when it is absent.
    Restart,
}

/// The index type of an array counter (a kernel op, a HANDLE_ERR code, a peer message
/// type): its slots and where each one sits.
pub trait CounterSlot: Copy + 'static {
    /// Every slot, in array order.
    const ALL: &'static [Self];
    /// Length of the array that holds the counts (may exceed `ALL.len()`: codes that do
    /// not exist keep their slot).
    const LEN: usize;
    /// Index of this slot in the array of counts.
    fn slot(self) -> usize;
    /// Position of this slot in [`CounterSlot::ALL`] (and in the counter's name table).
    fn ordinal(self) -> usize;
}

/// Declares a counter enum from one list: per counter its variant, name, kind
/// ([`CounterKind`]), help text (its doc comment) and, when not everywhere, the
/// [`Surface`]s it shows on (`in [Status, Dump]`) and its [`Presence`] (`when Restart`).
/// An array counter names its slot type ([`CounterSlot`]) and a table of its slots' names.
///
/// ```text
/// iwpm_report::counters! {
///     /// The doc of the enum.
///     pub enum MyCounter;
///     /// Help text of `a`.
///     A => a: Total;
///     /// Help text of `b`.
///     B => b: Gauge, in [Status, Dump], when Restart;
///     /// Help text of `c_*`.
///     C(KernelOp, C_NAMES) => c: Total;
/// }
/// ```
///
/// With `struct NAME;` after the enum line it also defines that struct, one `u64` (or array
/// of them) per counter named after it, with `get` and `set` by counter.
#[macro_export]
macro_rules! counters {
    (@len) => { 1 };
    (@len $slot:ty) => { <$slot as $crate::CounterSlot>::ALL.len() };
    (@bind $slot:ty, $s:ident) => { $s };
    (@wild $slot:ty) => { _ };
    (@name $name:ident) => { stringify!($name) };
    (@name $name:ident, $names:ident, $s:ident) => { $names[$crate::CounterSlot::ordinal($s)] };
    (@ordinal $names:ident, $s:ident) => { $crate::CounterSlot::ordinal($s) };
    (@slot $names:ident, $s:ident) => { $crate::CounterSlot::slot($s) };
    (@field) => { u64 };
    (@field $slot:ty) => { [u64; <$slot as $crate::CounterSlot>::LEN] };
    (@shows) => {
        &[$crate::Surface::Status, $crate::Surface::Dump, $crate::Surface::Metrics]
    };
    (@shows [$($surface:ident),*]) => { &[$($crate::Surface::$surface),*] };
    (@presence) => { $crate::Presence::Always };
    (@presence $presence:ident) => { $crate::Presence::$presence };
    (@fill $all:ident, $i:ident, $v:path) => {
        $all[$i] = Some($v);
        $i += 1;
    };
    (@fill $all:ident, $i:ident, $v:path, $slot:ty) => {
        let slots = <$slot as $crate::CounterSlot>::ALL;
        let mut k = 0;
        while k < slots.len() {
            $all[$i] = Some($v(slots[k]));
            $i += 1;
            k += 1;
        }
    };

    // The enum and a struct of the counts.
    (
        $(#[$enum_meta:meta])*
        $enum_vis:vis enum $Enum:ident;
        $(#[$store_meta:meta])*
        $store_vis:vis struct $Store:ident;
        $(
            $(#[doc = $doc:literal])*
            $Variant:ident $(($Slot:ty, $names:ident))? => $name:ident: $kind:ident
                $(, in [$($surface:ident),*])? $(, when $presence:ident)?;
        )*
    ) => {
        $crate::counters! {
            $(#[$enum_meta])*
            $enum_vis enum $Enum;
            $(
                $(#[doc = $doc])*
                $Variant $(($Slot, $names))? => $name: $kind
                    $(, in [$($surface),*])? $(, when $presence)?;
            )*
        }

        $(#[$store_meta])*
        $store_vis struct $Store {
            $(
                $(#[doc = $doc])*
                pub $name: $crate::counters!(@field $($Slot)?),
            )*
        }

        impl $Store {
            /// The value of one counter.
            pub fn get(&self, counter: $Enum) -> u64 {
                match counter {
                    $(
                        $Enum::$Variant $(($crate::counters!(@bind $Slot, slot)))? =>
                            self.$name $([$crate::counters!(@slot $names, slot)])?,
                    )*
                }
            }

            /// Sets one counter (for tools that rebuild the counts from printed pairs).
            pub fn set(&mut self, counter: $Enum, value: u64) {
                match counter {
                    $(
                        $Enum::$Variant $(($crate::counters!(@bind $Slot, slot)))? =>
                            self.$name $([$crate::counters!(@slot $names, slot)])? = value,
                    )*
                }
            }
        }
    };

    // The enum alone.
    (
        $(#[$enum_meta:meta])*
        $enum_vis:vis enum $Enum:ident;
        $(
            $(#[doc = $doc:literal])*
            $Variant:ident $(($Slot:ty, $names:ident))? => $name:ident: $kind:ident
                $(, in [$($surface:ident),*])? $(, when $presence:ident)?;
        )*
    ) => {
        $(#[$enum_meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $enum_vis enum $Enum {
            $(
                $(#[doc = $doc])*
                $Variant $(($Slot))?,
            )*
        }

        impl $Enum {
            /// Every counter, in declaration order (an array counter's slots in array
            /// order): the order every export prints them in.
            pub const ALL: &'static [$Enum] = &{
                const N: usize = 0 $(+ $crate::counters!(@len $($Slot)?))*;
                let mut all: [Option<$Enum>; N] = [None; N];
                let mut i = 0;
                $($crate::counters!(@fill all, i, $Enum::$Variant $(, $Slot)?);)*
                assert!(i == N, "every counter fills one place");
                let first = match all[0] {
                    Some(c) => c,
                    None => panic!("a counter list is empty"),
                };
                let mut out = [first; N];
                let mut k = 0;
                while k < N {
                    if let Some(c) = all[k] {
                        out[k] = c;
                    }
                    k += 1;
                }
                out
            };

            /// Every counter, in [`Self::ALL`] order.
            pub fn all() -> impl Iterator<Item = $Enum> + Clone {
                Self::ALL.iter().copied()
            }

            /// The stable snake_case name every export prints (an array counter's slots
            /// add the slot, e.g. `netlink_in_query_mapping`).
            pub fn name(self) -> &'static str {
                match self {
                    $(
                        Self::$Variant $(($crate::counters!(@bind $Slot, slot)))? =>
                            $crate::counters!(@name $name $(, $names, slot)?),
                    )*
                }
            }

            /// Whether it only grows or is a level.
            pub fn kind(self) -> $crate::CounterKind {
                match self {
                    $(
                        Self::$Variant $(($crate::counters!(@wild $Slot)))? =>
                            $crate::CounterKind::$kind,
                    )*
                }
            }

            /// A gauge (the current level), not a counter that only grows.
            pub fn is_gauge(self) -> bool {
                self.kind() == $crate::CounterKind::Gauge
            }

            /// What it counts, in one line (the metrics' `# HELP`).
            pub fn help(self) -> &'static str {
                let doc: &'static str = match self {
                    $(
                        Self::$Variant $(($crate::counters!(@wild $Slot)))? =>
                            concat!($($doc),*),
                    )*
                };
                doc.trim()
            }

            /// Where the daemon publishes it.
            pub fn shows(self) -> &'static [$crate::Surface] {
                match self {
                    $(
                        Self::$Variant $(($crate::counters!(@wild $Slot)))? =>
                            $crate::counters!(@shows $([$($surface),*])?),
                    )*
                }
            }

            /// Whether the daemon publishes it on `surface`.
            pub fn shows_in(self, surface: $crate::Surface) -> bool {
                self.shows().contains(&surface)
            }

            /// Whether the daemon always has it.
            pub fn presence(self) -> $crate::Presence {
                match self {
                    $(
                        Self::$Variant $(($crate::counters!(@wild $Slot)))? =>
                            $crate::counters!(@presence $($presence)?),
                    )*
                }
            }

            /// Position in [`Self::ALL`].
            pub fn index(self) -> usize {
                let mut start = 0;
                $(
                    if let Self::$Variant $(($crate::counters!(@bind $Slot, slot)))? = self {
                        return start $(+ $crate::counters!(@ordinal $names, slot))?;
                    }
                    start += $crate::counters!(@len $($Slot)?);
                )*
                start
            }

            /// The counter with this name.
            pub fn from_name(name: &str) -> Option<$Enum> {
                Self::all().find(|c| c.name() == name)
            }
        }

        impl ::std::fmt::Display for $Enum {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
