package identity

import "testing"

// TestIsAccountField: every name some parser reads as the account field
// is one, and names no parser reads as it are not.
func TestIsAccountField(t *testing.T) {
	for _, v := range []struct {
		name, field string
		want        bool
	}{
		{"username", "username", true},
		{"Username", "username", true},
		{"uſername", "username", true},
		{"username[]", "username", true},
		{"username[0]", "username", true},
		{"[username]", "username", true},
		{" username", "username", true},
		{"  username ", "username", true},
		{"username\x00", "username", true},
		{"username\x00x", "username", true},
		{"user.name", "user_name", true},
		{"user name", "user_name", true},
		{"user_name", "user.name", true},
		{"user_name", "username", false},
		{"usernames", "username", false},
		{"password", "username", false},
		{"model.username", "username", true},
		{"model.Username", "username", true},
		{"user[username]", "username", true},
		{"user[username][]", "username", true},
		{"a[b].username", "username", true},
		{"prefs[usernames]", "username", false},
		{"device.name", "username", false},
		{"user[email]", "user[email]", true},
		{" user[email]", "user[email]", true},
		{"user[password]", "user[email]", false},
		{"user", "user[email]", false},
	} {
		if got := isAccountField(v.name, v.field); got != v.want {
			t.Errorf("isAccountField(%q, %q) = %v, want %v", v.name, v.field, got, v.want)
		}
	}
}

// TestAccountKey: spellings a case- and accent-insensitive lookup takes
// as one account share a key; other accounts do not.
func TestAccountKey(t *testing.T) {
	same := [][]string{
		{"alice", "Alice", " alice ", "ａｌｉｃｅ", "ALICE", "alicé", "ålice", "alice\u0301", "ałice", "ali\u00adce", "a\u200blice"},
		{"strasse", "Straße", "STRASSE"},
		{"aeon", "æon"},
		{"ole", "Øle"},
	}
	keys := map[string]string{}
	for _, group := range same {
		k := AccountKey(group[0])
		for _, s := range group[1:] {
			if AccountKey(s) != k {
				t.Errorf("%q and %q have different keys", group[0], s)
			}
		}
		if other, ok := keys[k]; ok {
			t.Errorf("%q and %q share a key", group[0], other)
		}
		keys[k] = group[0]
	}
	for _, s := range []string{"alice1", "alic", "a.lice", "a lice", "bob", "日本", "日"} {
		if other, ok := keys[AccountKey(s)]; ok {
			t.Errorf("%q and %q share a key", s, other)
		}
		keys[AccountKey(s)] = s
	}
}
