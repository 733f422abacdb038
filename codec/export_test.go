package codec

// HeldBody reports how many bytes the parser has allocated for the body in
// progress, for the test that a large declared size is not allocated up
// front.
func (p *Parser) HeldBody() int { return p.BodyHeld() }
