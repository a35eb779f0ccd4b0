//! Loom models of the `LOCAL` protocol (run with `RUSTFLAGS="--cfg loom"`
//! and `--features loom-desc`): every interleaving of an
//! owner's free with another thread's speculative reference.

use super::*;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;

const CPU: usize = 40;
const TAG: u8 = 1;

fn local_page() -> Arc<PageDesc> {
    let page = Arc::new(PageDesc::default());
    page.store_word(DescWord::local(PageFlags::ALLOCATED, 0, TAG, CPU));
    page
}

fn free_word() -> DescWord {
    DescWord::cached(TAG)
}

/// The general free's reference drop: the caller holds a reference;
/// if it was the last, the caller frees the page (and counts it).
fn put_reference(page: &PageDesc, freed: &AtomicUsize) {
    match page.try_put() {
        Some(0) => {
            freed.fetch_add(1, Relaxed);
            page.set_free_state(PageFlags::PCP, 0, TAG);
        }
        Some(_) => {}
        None => panic!("a reference held could not be dropped"),
    }
}

/// A speculative `get_page`: take a reference if the word allows it,
/// then drop it again.
fn speculate(page: &PageDesc, freed: &AtomicUsize) {
    if page.try_get().is_some() {
        put_reference(page, freed);
    }
}

/// The owner's free (the magazine's at order 0, a locked zone's at any
/// order): one load, one plain store, while another thread tries every
/// read-modify-write that could take the page. None may succeed, and
/// the store must be the page's last word.
#[test]
fn owner_plain_free_is_never_overtaken() {
    for order in [0, 9] {
        loom::model(move || {
            let page = Arc::new(PageDesc::default());
            page.store_word(DescWord::local(PageFlags::ALLOCATED, order, TAG, CPU));
            let other = {
                let page = Arc::clone(&page);
                thread::spawn(move || {
                    assert!(page.try_get().is_none(), "reference taken on a LOCAL page");
                    assert!(page.try_put().is_none(), "reference dropped on a LOCAL page");
                    assert!(page.try_put_splitting().is_none(), "reference dropped on a LOCAL page");
                    assert!(!page.refcount_exchange(1, 0), "refcount exchanged on a LOCAL page");
                })
            };
            assert!(page.load_word().is_local_block(order, CPU));
            page.free_from_local(free_word());
            other.join().unwrap();
            assert_eq!(page.load_word(), free_word());
        });
    }
}

/// The hand-over: the owner clears `LOCAL` (one compare-and-swap), then
/// frees through the general path's reference drop, racing a
/// speculative reference. Exactly one of the two frees the page.
#[test]
fn hand_over_then_free_frees_exactly_once() {
    loom::model(|| {
        let page = local_page();
        let freed = Arc::new(AtomicUsize::new(0));
        let other = {
            let (page, freed) = (Arc::clone(&page), Arc::clone(&freed));
            thread::spawn(move || speculate(&page, &freed))
        };
        assert!(page.clear_local(CPU), "the owner's page");
        assert_eq!(page.local_cpu(), None);
        put_reference(&page, &freed);
        other.join().unwrap();
        assert_eq!(freed.load(Relaxed), 1, "freed exactly once");
        assert_eq!(page.load_word(), free_word());
    });
}

/// `__free_pages` of a non-compound order-3 block while a speculative
/// reference is out: the owner's drop and the speculator's drop race.
/// Whoever drops last frees the head, and must see order 3 only if it
/// is the owner (who then frees the whole block); the speculator, if
/// last, must see order 0 (the owner freed the rest).
#[test]
fn splitting_drop_races_a_speculative_reference() {
    loom::model(|| {
        const ORDER: u32 = 3;
        let page = Arc::new(PageDesc::default());
        page.store_word(DescWord::allocated(PageFlags::ALLOCATED, ORDER, TAG, 1));
        let other = {
            let page = Arc::clone(&page);
            thread::spawn(move || {
                if page.try_get().is_some() && page.try_put() == Some(0) {
                    assert_eq!(page.order(), 0, "the speculator would free the whole block again");
                }
            })
        };
        match page.try_put_splitting() {
            Some(0) => assert_eq!(page.order(), ORDER),
            Some(_) => {}
            None => panic!("the owner's reference could not be dropped"),
        }
        other.join().unwrap();
    });
}

/// A per-CPU cache's free of an ordinary page: one compare-and-swap
/// from the allocated word (refcount 1) to the cached word drops the
/// reference and writes the state. A speculative reference either
/// comes first (the exchange fails and the general path takes over) or
/// is refused (refcount 0).
#[test]
fn cached_free_races_a_speculative_reference() {
    loom::model(|| {
        let page = Arc::new(PageDesc::default());
        let allocated = DescWord::allocated(PageFlags::ALLOCATED, 0, TAG, 1);
        page.store_word(allocated);
        let freed = Arc::new(AtomicUsize::new(0));
        let other = {
            let (page, freed) = (Arc::clone(&page), Arc::clone(&freed));
            thread::spawn(move || speculate(&page, &freed))
        };
        if page.load_word() == allocated && page.drop_last_reference(allocated, free_word()) {
            freed.fetch_add(1, Relaxed);
        } else {
            // The general path: drop our reference; the last one frees.
            put_reference(&page, &freed);
        }
        other.join().unwrap();
        assert_eq!(freed.load(Relaxed), 1, "freed exactly once");
        assert_eq!(page.load_word(), free_word());
    });
}
