//! Bearer tokens and the one-time pairing code (STATE-15, STATE-21).
//!
//! - A token is `wrn_` + 64 hex (32 random bytes). Only its SHA-256 hex is ever stored (in
//!   `gateway.paired_tokens`, through the config owner); comparison is constant time.
//! - A pairing code is 6 uniform digits, exists only after the operator asked for one (`warren
//!   pair`), expires, and is consumed by its first successful use.
//! - Failed pairing attempts are counted per client address; too many lock that client out.
//!
//! Nothing here logs a token or a code.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Every bearer token starts with this.
pub const TOKEN_PREFIX: &str = "wrn_";
/// How long a pairing code stays valid.
pub const CODE_TTL: Duration = Duration::from_secs(300);
/// Failed attempts before a client is locked out.
pub const MAX_FAILURES: u32 = 5;
/// How long a lockout lasts.
pub const LOCKOUT: Duration = Duration::from_secs(300);
/// Wrong guesses (from all clients together) that burn the pending code: many source addresses
/// (the whole 127.0.0.0/8 on loopback) cannot share out a brute force of the 10^6 codes.
pub const MAX_CODE_FAILURES: u32 = 10;
/// Failures older than this are forgotten.
const FAILURE_WINDOW: Duration = Duration::from_secs(900);
/// At most this many clients are tracked (the oldest entry is evicted first).
const MAX_TRACKED_CLIENTS: usize = 10_000;

/// The operating system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("no randomness available from the operating system: {0}")]
pub struct RandomError(String);

fn random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| RandomError(e.to_string()))?;
    Ok(buf)
}

/// A fresh bearer token: `wrn_` + 64 lowercase hex.
pub fn new_token() -> Result<String, RandomError> {
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        warren_core::hex::encode(&random_bytes::<32>()?)
    ))
}

/// A fresh random key (64 hex), e.g. the local admin key.
pub fn new_key() -> Result<String, RandomError> {
    Ok(warren_core::hex::encode(&random_bytes::<32>()?))
}

/// SHA-256 of `token`, lowercase hex: the only form in which a token is stored.
pub fn hash_token(token: &str) -> String {
    warren_core::hex::encode(&Sha256::digest(token.as_bytes()))
}

/// Constant-time equality of two strings (the length is not secret).
pub fn ct_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The stored hash `token` matches, if any. Every stored hash is compared, in constant time.
pub fn find_token<'a>(token: &str, hashes: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if token.is_empty() {
        return None;
    }
    let hashed = hash_token(token);
    let mut found = None;
    for stored in hashes {
        if ct_eq(&hashed, stored) && found.is_none() {
            found = Some(stored);
        }
    }
    found
}

/// The short, public id of a device: the first 12 hex digits of its token hash.
pub fn device_id(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Six digits, uniform (rejection sampling).
fn new_code() -> Result<String, RandomError> {
    const LIMIT: u32 = u32::MAX - (u32::MAX % 1_000_000);
    loop {
        let n = u32::from_le_bytes(random_bytes::<4>()?);
        if n < LIMIT {
            return Ok(format!("{:06}", n % 1_000_000));
        }
    }
}

/// Why a pairing attempt was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairRefused {
    #[error("too many failed pairing attempts from this client; retry in {retry_after_secs} s")]
    LockedOut { retry_after_secs: u64 },
    #[error(
        "wrong or expired pairing code ({attempts_left} attempts left before a lockout); ask the operator to run `warren pair`"
    )]
    WrongCode { attempts_left: u32 },
}

struct Pending {
    code: String,
    expires: Instant,
    wrong_guesses: u32,
}

struct Failures {
    count: u32,
    last: Instant,
    locked_until: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    code: Option<Pending>,
    /// The code consumed by the last successful [`Pairing::redeem`], until its token is saved
    /// or [`Pairing::give_back`] restores it.
    redeemed: Option<Pending>,
    failures: HashMap<IpAddr, Failures>,
}

/// The pending code and the per-client failure counts. Process-wide: survives reloads, so a
/// reload does not reset a lockout.
#[derive(Default)]
pub struct Pairing {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Pairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pairing { .. }")
    }
}

impl Pairing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Issues a new one-time code (replacing any pending one), valid for [`CODE_TTL`].
    pub fn issue_code(&self) -> Result<(String, Duration), RandomError> {
        let code = new_code()?;
        self.lock().code = Some(Pending {
            code: code.clone(),
            expires: Instant::now() + CODE_TTL,
            wrong_guesses: 0,
        });
        Ok((code, CODE_TTL))
    }

    /// Restores `code` after a successful [`Self::redeem`] whose token could not be issued (the
    /// config could not be saved): a pairing refused for the daemon's reasons never consumes
    /// the code (issue 15 §3). Nothing happens if another code was issued meanwhile or it
    /// expired.
    pub fn give_back(&self, code: &str) {
        let mut inner = self.lock();
        let ours = inner
            .redeemed
            .as_ref()
            .is_some_and(|p| p.expires > Instant::now() && ct_eq(&p.code, code.trim()));
        if ours && inner.code.is_none() {
            inner.code = inner.redeemed.take();
        }
    }

    /// Whether a code is pending (and unexpired).
    pub fn has_code(&self) -> bool {
        self.lock()
            .code
            .as_ref()
            .is_some_and(|p| p.expires > Instant::now())
    }

    /// Checks `code` for `client`. On success the code is consumed; on failure the client's
    /// count goes up and may lock it out. A locked-out client is refused without a comparison.
    pub fn redeem(&self, client: IpAddr, code: &str) -> Result<(), PairRefused> {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some(f) = inner.failures.get(&client)
            && let Some(until) = f.locked_until
            && until > now
        {
            return Err(PairRefused::LockedOut {
                retry_after_secs: (until - now).as_secs().max(1),
            });
        }
        let valid = inner
            .code
            .as_ref()
            .filter(|p| p.expires > now)
            .is_some_and(|p| ct_eq(&p.code, code.trim()));
        if valid {
            inner.redeemed = inner.code.take();
            inner.failures.remove(&client);
            return Ok(());
        }
        if let Some(pending) = inner.code.as_mut() {
            pending.wrong_guesses += 1;
            if pending.wrong_guesses >= MAX_CODE_FAILURES {
                inner.code = None; // burnt: the operator runs `warren pair` again
            }
        }
        if inner.failures.len() >= MAX_TRACKED_CLIENTS && !inner.failures.contains_key(&client) {
            inner
                .failures
                .retain(|_, f| now.duration_since(f.last) < FAILURE_WINDOW);
            if inner.failures.len() >= MAX_TRACKED_CLIENTS
                && let Some(oldest) = inner
                    .failures
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(ip, _)| *ip)
            {
                inner.failures.remove(&oldest);
            }
        }
        let entry = inner.failures.entry(client).or_insert(Failures {
            count: 0,
            last: now,
            locked_until: None,
        });
        if now.duration_since(entry.last) >= FAILURE_WINDOW || entry.locked_until.is_some() {
            entry.count = 0;
            entry.locked_until = None;
        }
        entry.count += 1;
        entry.last = now;
        if entry.count >= MAX_FAILURES {
            entry.locked_until = Some(now + LOCKOUT);
            return Err(PairRefused::LockedOut {
                retry_after_secs: LOCKOUT.as_secs(),
            });
        }
        Err(PairRefused::WrongCode {
            attempts_left: MAX_FAILURES - entry.count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_the_prefix_and_64_hex_and_hash_to_64_hex_state21() {
        let token = new_token().unwrap();
        let hex_part = token.strip_prefix(TOKEN_PREFIX).unwrap();
        assert_eq!(hex_part.len(), 64);
        assert!(hex_part.bytes().all(|b| b.is_ascii_hexdigit()));
        let hash = hash_token(&token);
        assert_eq!(hash.len(), 64);
        assert_ne!(hash, hex_part);
        assert_eq!(find_token(&token, [hash.as_str()]), Some(hash.as_str()));
        assert_eq!(find_token("wrn_x", [hash.as_str()]), None);
        assert_eq!(find_token("", [""]), None, "an empty token never matches");
    }

    #[test]
    fn a_code_given_back_after_a_failed_save_pairs_once_more() {
        let pairing = Pairing::default();
        let client: IpAddr = [127, 0, 0, 1].into();
        let (code, _) = pairing.issue_code().unwrap();
        assert_eq!(pairing.redeem(client, &code), Ok(()));
        pairing.give_back(&code);
        assert!(pairing.has_code());
        assert_eq!(pairing.redeem(client, &code), Ok(()));
        assert!(pairing.redeem(client, &code).is_err(), "still one use");
        pairing.give_back("000000");
        assert!(!pairing.has_code(), "only the redeemed code comes back");
    }

    #[test]
    fn a_code_is_six_digits_one_time_and_brute_force_locks_out_state21() {
        let pairing = Pairing::default();
        let client: IpAddr = [127, 0, 0, 1].into();
        assert!(!pairing.has_code());
        assert!(matches!(
            pairing.redeem(client, "000000"),
            Err(PairRefused::WrongCode { attempts_left: 4 })
        ));
        let (code, _) = pairing.issue_code().unwrap();
        assert_eq!(code.len(), 6);
        assert!(code.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(pairing.redeem(client, &code), Ok(()));
        assert!(
            pairing.redeem(client, &code).is_err(),
            "a code works only once"
        );

        let attacker: IpAddr = [10, 0, 0, 9].into();
        let (code, _) = pairing.issue_code().unwrap();
        let wrong = if code == "111111" { "222222" } else { "111111" };
        for _ in 0..MAX_FAILURES - 1 {
            assert!(matches!(
                pairing.redeem(attacker, wrong),
                Err(PairRefused::WrongCode { .. })
            ));
        }
        assert!(matches!(
            pairing.redeem(attacker, wrong),
            Err(PairRefused::LockedOut { .. })
        ));
        // Locked out: even the right code is refused, and it stays pending for others.
        assert!(matches!(
            pairing.redeem(attacker, &code),
            Err(PairRefused::LockedOut { .. })
        ));
        assert_eq!(pairing.redeem(client, &code), Ok(()));
    }

    #[test]
    fn wrong_guesses_from_many_addresses_burn_the_code_state21() {
        let pairing = Pairing::default();
        let (code, _) = pairing.issue_code().unwrap();
        let wrong = if code == "111111" { "222222" } else { "111111" };
        for i in 0..MAX_CODE_FAILURES {
            let client: IpAddr = [127, 0, 1, u8::try_from(i).unwrap()].into();
            assert!(pairing.redeem(client, wrong).is_err());
        }
        assert!(!pairing.has_code(), "the code is burnt");
        let fresh: IpAddr = [127, 0, 2, 1].into();
        assert!(pairing.redeem(fresh, &code).is_err(), "even the right code");
    }
}
