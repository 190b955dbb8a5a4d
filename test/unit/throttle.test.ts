/**
 * Address grouping for throttling (src/throttle.ts `addressKey`): which client addresses
 * share one counter. IPv4 addresses count one by one; IPv6 addresses by /64, because one
 * host usually holds a whole /64 and could otherwise walk through fresh addresses.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { addressKey } from '../../src/throttle.ts';

describe('addressKey', () => {
  test('an IPv4 address is its own key', () => {
    assert.equal(addressKey('203.0.113.7'), '203.0.113.7');
    assert.notEqual(addressKey('203.0.113.7'), addressKey('203.0.113.8'));
  });

  test('an IPv4-mapped IPv6 address counts as the IPv4 address, however it is written', () => {
    // Node reports IPv4 clients of a dual-stack socket as ::ffff:a.b.c.d; a proxy header may
    // spell the same address differently. Each must not fall into one shared 0:0:0:0::/64.
    for (const mapped of ['::ffff:203.0.113.7', '::FFFF:203.0.113.7', '0:0:0:0:0:ffff:203.0.113.7', '::ffff:cb00:7107']) {
      assert.equal(addressKey(mapped), '203.0.113.7', mapped);
    }
  });

  test('IPv6 addresses in one /64 share a key; another /64 gets another', () => {
    const key = addressKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd');
    assert.equal(key, '2001:db8:1:2::/64');
    assert.equal(addressKey('2001:db8:1:2::1'), key);
    assert.equal(addressKey('2001:db8:1:2:ffff:ffff:ffff:ffff'), key);
    assert.notEqual(addressKey('2001:db8:1:3::1'), key);
  });

  test('compressed, padded and upper-case spellings of one /64 give one key', () => {
    for (const spelling of ['2001:db8::', '2001:db8::1', '2001:0db8:0000:0000::', '2001:DB8:0:0:0:0:0:0', '2001:db8:0:0::5']) {
      assert.equal(addressKey(spelling), '2001:db8:0:0::/64', spelling);
    }
  });

  test('loopback and the unspecified address', () => {
    assert.equal(addressKey('::1'), '0:0:0:0::/64');
    assert.equal(addressKey('::'), '0:0:0:0::/64');
  });

  test('the zero run may sit inside the prefix', () => {
    assert.equal(addressKey('2001::7:8:9:a'), '2001:0:0:0::/64');
    assert.equal(addressKey('1:2::3:4:5:6'), '1:2:0:0::/64');
    assert.equal(addressKey('1::3:4:5:6:7'), '1:0:0:3::/64');
    assert.equal(addressKey('1::3:4:5:6:7:8'), '1:0:3:4::/64');
  });

  test('an embedded IPv4 tail counts as two groups', () => {
    // 1::3:4:5:6.7.8.9 is 1:0:0:3:4:5:0607:0809 — counted as one group, the tail would
    // leave room for three zeros and push 3 out of the prefix.
    assert.equal(addressKey('1::3:4:5:6.7.8.9'), '1:0:0:3::/64');
    assert.equal(addressKey('1::4:5:6:7:8.9.10.11'), '1:0:4:5::/64');
    assert.equal(addressKey('64:ff9b::192.0.2.33'), '64:ff9b:0:0::/64');
  });

  test('a zone index names the interface, not the host, and is ignored', () => {
    assert.equal(addressKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
    assert.equal(addressKey('fe80::1%2'), addressKey('fe80::2'));
  });

  test('malformed input never throws: it is keyed as given', () => {
    // A proxy trusted by hop count passes X-Forwarded-For through verbatim, so request.ip
    // may be any string; throwing here would turn a login or token request into a 500.
    for (const garbage of ['', 'garbage', '1:2:3:4:5:6:7:8::9', '1:2:3:4:5:6:7:8:9', ':::', '2001:db8::g', '300.1.1.1', '::ffff:']) {
      assert.doesNotThrow(() => addressKey(garbage), garbage);
      assert.equal(addressKey(garbage), garbage, garbage);
    }
  });
});
