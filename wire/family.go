package wire

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
