package wire

import "strings"

// ValidFamily reports whether name may be a plugin family name: the part
// of a plugin binary's name after BinaryPrefix, and the name a plugin
// gives itself in its description. A family name is not empty, holds only
// ASCII letters, digits, '_' and '-', and starts with a letter or a digit.
func ValidFamily(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// StagingSuffixes are the endings of a plugin binary's file name while it
// is being put in place or kept aside (attnplug-backend-fa3.new): a host
// skips such files in a plugin directory, and attnplug conform checks one
// as the binary it will become.
func StagingSuffixes() []string { return []string{".new", ".tmp", ".old", ".bak"} }

// FamilyOf returns the family name the file name of a plugin binary gives
// (attnplug-backend-fa3 and attnplug-backend-fa3.new give fa3), whether
// the name is a staged one (StagingSuffixes), and whether it is a plugin
// binary's name at all.
func FamilyOf(file string) (family string, staged, ok bool) {
	family, ok = strings.CutPrefix(file, BinaryPrefix)
	if !ok {
		return "", false, false
	}
	for _, suf := range StagingSuffixes() {
		if base, cut := strings.CutSuffix(family, suf); cut {
			return base, true, true
		}
	}
	return family, false, true
}
